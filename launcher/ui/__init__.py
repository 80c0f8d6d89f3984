"""What people see: the tables (one renderer, ``table``; the task columns declared once, ``columns``)."""
