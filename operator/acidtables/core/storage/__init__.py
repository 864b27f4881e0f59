"""Table locations: the one place that opens files (`storage`: local paths and S3 through pyarrow's
file systems, the data/staging/metadata layout) and who owns a location (`locations`)."""
