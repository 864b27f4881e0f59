"""Table schemas: the DDL a user writes (`ddl`), column types (`types`), and the schema a data file
must have to join a table (`file_schema`, with the primary-key tables' `_acid_op` / `_acid_seq`)."""
