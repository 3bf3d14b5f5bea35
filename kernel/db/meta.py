"""The one ``MetaData`` every table of truerun is defined on, and the id column type.

Kept apart from kernel/db/schema.py so that a domain's tables can live in a sibling module
(kernel/db/longtask_tables.py) without an import cycle: schema.py imports that module, and
both import this one.
"""

from __future__ import annotations

from sqlalchemy import MetaData, String

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(64)
