"""The schedules tables, in each backend's dialect: only this package writes them."""
