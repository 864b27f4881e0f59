"""etcd's space: what each table holds, each member's database against its quota, and giving a full
etcd its space back (design §2: a full etcd stops every table at once)."""

from __future__ import annotations

import ssl
import urllib.request
from dataclasses import dataclass

import grpc
from pyetcd import utils as etcd_utils

from acidtables.core.coordination import failures
from acidtables.core.coordination.connection import Connection
from acidtables.core.errors import CoordinatorRefused


@dataclass(frozen=True)
class EndpointUsage:
    """One etcd member's database against its quota, from its own /metrics (etcd-usage, the operator)."""

    endpoint: str
    db_size_bytes: int | None = None
    #: the part of the database holding live data; the rest is free pages a defragmentation returns
    db_in_use_bytes: int | None = None
    quota_bytes: int | None = None
    #: why the member could not be asked (None: it answered)
    error: str | None = None

    @property
    def used_fraction(self) -> float | None:
        if self.db_size_bytes is None or not self.quota_bytes:
            return None
        return self.db_size_bytes / self.quota_bytes


class Space(Connection):
    """Usage, quota and reclaiming space."""

    def table_usage(self, table_id: str) -> tuple[int, int]:
        """Keys and bytes (keys plus values) the table holds in etcd now."""
        prefix = self.keys.table(table_id)
        values = self._paged_range("a usage count", prefix, etcd_utils.prefix_range_end(prefix.encode()).decode())
        return len(values), sum(len(v) + len(m.key) for v, m in values)

    def endpoint_usage(self) -> list[EndpointUsage]:
        """Each endpoint's database size, in-use size and quota, read from its /metrics page (etcd's
        gRPC status answer carries no quota)."""
        out = []
        for url in self.settings.endpoints:
            try:
                metrics = self._metrics(url)
            except (OSError, ValueError) as exc:
                out.append(EndpointUsage(url, error=str(exc)))
                continue
            out.append(
                EndpointUsage(
                    url,
                    db_size_bytes=metrics.get("etcd_mvcc_db_total_size_in_bytes"),
                    db_in_use_bytes=metrics.get("etcd_mvcc_db_total_size_in_use_in_bytes"),
                    quota_bytes=metrics.get("etcd_server_quota_backend_bytes"),
                )
            )
        return out

    def _metrics(self, url: str) -> dict[str, int]:
        context = None
        if url.startswith("https://"):
            context = ssl.create_default_context(cafile=self.settings.ca_file)
            if self.settings.cert_file:
                context.load_cert_chain(self.settings.cert_file, self.settings.key_file)
        timeout = self.settings.request_timeout_seconds
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout, context=context) as answer:
            text = answer.read().decode()
        wanted = ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes")
        found: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in (*wanted, "etcd_server_quota_backend_bytes"):
                found[name] = int(float(value))
        return found

    def reclaim_space(self) -> list[EndpointUsage]:
        """Give a full etcd its space back: compact its key history up to now, defragment every member
        (a database file only shrinks that way), then lift the NOSPACE alarm if every member is below its
        quota again. etcd takes only reads and deletes while the alarm is raised, so this comes first;
        archiving (expire) after it frees the log itself. Returns the usage after."""
        revision = self._call("a revision read", lambda c: c.get_response(self.prefix + "/").header.revision)
        try:
            self._call("a history compaction", lambda c: c.compact(revision, physical=True), cluster_wide=True)
        except CoordinatorRefused as exc:  # already compacted at or past this revision
            if "compacted" not in str(exc):
                raise
        for url in self.settings.endpoints:
            member = self._connect(endpoints=(url,))
            try:
                member.defragment()
            except grpc.RpcError as exc:
                raise failures.refused(self.settings, f"a defragmentation of {url}", exc, cluster_wide=True) from exc
            finally:
                member.close()
        usage = self.endpoint_usage()
        if all(u.error is None and (u.used_fraction or 0) < 1 for u in usage):
            # as `etcdctl alarm disarm` does: each raised alarm, by the member that raised it
            for alarm in self._call("an alarm listing", lambda c: list(c.list_alarms())):
                member_id = int(alarm.member_id)
                self._call(
                    "an alarm disarm",
                    lambda c, m=member_id: c.disarm_alarm(member_id=m),  # type: ignore[misc]
                    cluster_wide=True,
                )
        return usage

    def alarms(self) -> list[str]:
        """The cluster's raised alarms (NOSPACE: a member's database reached its quota)."""
        raised = self._call("an alarm listing", lambda c: list(c.list_alarms()))
        names = {1: "NOSPACE", 2: "CORRUPT"}
        return sorted({names.get(int(a.alarm_type), str(a.alarm_type)) for a in raised if int(a.alarm_type)})
