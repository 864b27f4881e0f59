"""The core of acidtables: the etcd commit point, the conflict rules and snapshots.

Everything that decides whether a commit wins lives here, so it is kept free of Spark
and Kubernetes: the same rules must hold whether a commit comes from a Spark job, the
operator or a test, and the core has to be testable against a bare etcd alone.

Its packages, each importing only those listed after it (an import-linter contract):

    catalog/        Catalog and Table: where a user's call comes in
    maintenance/    compaction planning, retention (expire, vacuum), cleanup, fsck, repair, live rows
    mirror/         the Delta Lake log kept beside a table for Delta readers (mirror.formats)
    read/           rows without Spark: a snapshot's files read into Arrow as Spark reads them
    commit/         a transaction, the committer's compare-and-swap and rebase, the conflict rules
    schema/         DDL, column types, the schema a data file must have
    log/            commit records, the log across etcd and archive segments, snapshots, checkpoints
    coordination/   everything that talks to etcd: the coordinator and its key layout, leader
                    election, the change feed, the embedded etcd
    storage/        table locations: the one place that opens files, and who owns a location
    expressions/    predicates: SQL conditions, their trees, pruning by partition and statistics

and the leaves every package may use: errors, events (commit events for observers), settings,
durations and names.

This module is the core's public face: the Spark integration, the CLI and the metrics import only the
names below (an import-linter contract keeps it so), and the modules behind it stay free to move.
"""

from acidtables.core.catalog.catalog import LOCAL_ETCD_MARKER, Catalog, PreparedCreate, user_data_dir
from acidtables.core.catalog.multi_table import MultiTableTransaction
from acidtables.core.catalog.table import Change, HistoryEntry, InFlight, Table, TimeLike
from acidtables.core.commit.presence import check_files_exist
from acidtables.core.commit.transaction import Transaction
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.coordination.feed import ChangeFeed, KeyChange, Resync
from acidtables.core.coordination.leader import Leadership, campaign
from acidtables.core.durations import parse_duration, spell_duration
from acidtables.core.errors import (
    CONFLICT_CLASSES,
    AcidTablesError,
    ConcurrentModificationException,
    ConfigurationError,
    CoordinatorFull,
    CoordinatorPermissionDenied,
    CoordinatorUnavailable,
    CorruptMetadataError,
    DataFilesMissingError,
    InvalidArgumentError,
    ProtocolChangedException,
    RowsLostError,
    StorageUnavailableError,
    StreamStoppedError,
    TableNotFoundError,
    VersionExpiredError,
    VersionNotFoundError,
)
from acidtables.core.events import CommitEvent
from acidtables.core.events import subscribe as subscribe_to_commits
from acidtables.core.expressions import (
    And,
    Compare,
    Dialect,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    in_partitions,
    literal_fits,
    might_match,
    parse_predicate,
    parse_target_predicate,
    read_predicate,
)
from acidtables.core.log.operations import Operation, Policy
from acidtables.core.log.records import (
    CONFLICT_DETECTION_PROPERTY,
    Column,
    ColumnStats,
    CommitInfo,
    CommitRecord,
    DataFile,
    FileKind,
    TableMetadata,
    to_datetime,
)
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.log.tablelog import ArchiveReport
from acidtables.core.maintenance.compaction import (
    CompactionGroup,
    CompactionPlan,
    PartitionFiles,
    files_in_scope,
    group_app_id,
    partition_files,
    plan_compaction,
)
from acidtables.core.maintenance.fsck import FsckCheck, FsckReport
from acidtables.core.maintenance.live_rows import LiveRowCounter, RowCounts
from acidtables.core.maintenance.repair import RepairReport
from acidtables.core.maintenance.retention import ExpireReport, Retention, VacuumReport, read_retention
from acidtables.core.mirror import MIRROR_PROPERTY, MirrorState, mirror_formats
from acidtables.core.names import split_name
from acidtables.core.process_exit import exit_process, stop_on_signals
from acidtables.core.read import TableScan, arrow_type, named_as, partition_text, read_schema
from acidtables.core.read import merge_on_read as merge_rows_on_read
from acidtables.core.read import read_file as read_data_file
from acidtables.core.schema.ddl import parse_schema
from acidtables.core.schema.file_schema import DELETE, OP_COLUMN, SEQ_COLUMN, UPSERT
from acidtables.core.schema.partition_values import (
    INTEGRAL_TYPES,
    TEXT_TYPES,
    log_partition_value,
    typed_partition_value,
)
from acidtables.core.settings import ENDPOINTS, VARIABLES, WAREHOUSE, CommitSettings, EtcdSettings, Settings
from acidtables.core.storage.locations import location_key
from acidtables.core.storage.storage import HIVE_NULL, STAGING_LEVELS, ObjectStore, Storage

__all__ = [
    "CONFLICT_CLASSES",
    "CONFLICT_DETECTION_PROPERTY",
    "DELETE",
    "ENDPOINTS",
    "HIVE_NULL",
    "INTEGRAL_TYPES",
    "LOCAL_ETCD_MARKER",
    "MIRROR_PROPERTY",
    "OP_COLUMN",
    "SEQ_COLUMN",
    "STAGING_LEVELS",
    "TEXT_TYPES",
    "UPSERT",
    "VARIABLES",
    "WAREHOUSE",
    "AcidTablesError",
    "And",
    "ArchiveReport",
    "Catalog",
    "Change",
    "ChangeFeed",
    "Column",
    "ColumnStats",
    "CommitEvent",
    "CommitInfo",
    "CommitRecord",
    "CommitSettings",
    "CompactionGroup",
    "CompactionPlan",
    "Compare",
    "ConcurrentModificationException",
    "ConfigurationError",
    "Coordinator",
    "CoordinatorFull",
    "CoordinatorPermissionDenied",
    "CoordinatorUnavailable",
    "CorruptMetadataError",
    "DataFile",
    "DataFilesMissingError",
    "Dialect",
    "EmbeddedEtcd",
    "EtcdSettings",
    "ExpireReport",
    "Expr",
    "FileKind",
    "FsckCheck",
    "FsckReport",
    "HistoryEntry",
    "In",
    "InFlight",
    "InvalidArgumentError",
    "IsNull",
    "KeyChange",
    "Leadership",
    "Literal",
    "LiveRowCounter",
    "MirrorState",
    "MultiTableTransaction",
    "Not",
    "ObjectStore",
    "Operation",
    "Or",
    "PartitionFiles",
    "Policy",
    "PreparedCreate",
    "ProtocolChangedException",
    "RepairReport",
    "Resync",
    "Retention",
    "RowCounts",
    "RowsLostError",
    "Settings",
    "Snapshot",
    "Storage",
    "StorageUnavailableError",
    "StreamStoppedError",
    "Table",
    "TableMetadata",
    "TableNotFoundError",
    "TableScan",
    "TimeLike",
    "Transaction",
    "VacuumReport",
    "VersionExpiredError",
    "VersionNotFoundError",
    "arrow_type",
    "campaign",
    "check_files_exist",
    "exit_process",
    "files_in_scope",
    "group_app_id",
    "in_partitions",
    "literal_fits",
    "location_key",
    "log_partition_value",
    "merge_rows_on_read",
    "might_match",
    "mirror_formats",
    "named_as",
    "parse_duration",
    "parse_predicate",
    "parse_schema",
    "parse_target_predicate",
    "partition_files",
    "partition_text",
    "plan_compaction",
    "read_data_file",
    "read_predicate",
    "read_retention",
    "read_schema",
    "spell_duration",
    "split_name",
    "stop_on_signals",
    "subscribe_to_commits",
    "to_datetime",
    "typed_partition_value",
    "user_data_dir",
]
