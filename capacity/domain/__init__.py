"""Pure capacity rules: occupancy, gates and the fair claim order. No I/O."""
