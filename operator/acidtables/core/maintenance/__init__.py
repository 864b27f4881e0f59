"""What keeps a table healthy after its commits: compaction planning, retention (expire, vacuum),
cleanup of abandoned staging and dropped tables, fsck and repair, and the live-row counts status shows.

Above the commit path (repair commits through a transaction) and below the catalog, whose tables call it.
"""
