{{- /*
  acidtables.etcdMemberGuard: refuse to change the bundled etcd's member count.

  A member's data volume keeps the membership the cluster was created with, and etcd ignores its
  --initial-cluster flags once it has data: a StatefulSet scaled from 3 to 1 leaves member 0 waiting for
  a quorum of a 3-member cluster for ever, and one scaled from 1 to 3 starts two members that can never
  join member 0's cluster. So the count is checked against what exists, through `lookup`:
    - the StatefulSet of this release: the member count its --initial-cluster flag names (what the
      cluster was created with, even after a `kubectl scale`);
    - with no StatefulSet (a first install, or a re-install after `helm uninstall`, which keeps the
      claims): the claims data-<name>-<ordinal> left behind must be exactly the ordinals 0..replicas-1.
  `lookup` answers nothing where there is no API server (`helm template`, `helm lint`, a client-side dry
  run), so there the guard passes; only an install or upgrade against a cluster can refuse.
*/ -}}
{{- define "acidtables.etcdMemberGuard" -}}
{{- $name := printf "%s-etcd" (include "acidtables.fullname" .) -}}
{{- $ns := .Release.Namespace -}}
{{- $want := int .Values.etcd.bundled.replicas -}}
{{- $snapshot := printf "etcdctl snapshot save (kubectl exec -n %s %s-0 -- etcdctl snapshot save /var/lib/etcd/backup.db, then kubectl cp it out), install a new release with the new member count and restore the snapshot into its members with etcdutl snapshot restore" $ns $name -}}
{{- $sts := lookup "apps/v1" "StatefulSet" $ns $name -}}
{{- if $sts -}}
  {{- $had := 0 -}}
  {{- range $container := dig "spec" "template" "spec" "containers" list $sts -}}
    {{- range $arg := $container.command | default list -}}
      {{- if hasPrefix "--initial-cluster=" $arg -}}
        {{- $had = len (splitList "," (trimPrefix "--initial-cluster=" $arg)) -}}
      {{- end -}}
    {{- end -}}
  {{- end -}}
  {{- if and $had (ne $had $want) -}}
    {{- $claims := list -}}
    {{- range $i := until $had }}{{ $claims = append $claims (printf "data-%s-%d" $name $i) }}{{ end -}}
    {{- fail (printf "etcd.bundled.replicas is %d, but the bundled etcd %s/%s was created as a %d-member cluster and its volumes keep that membership: with %d members it would never reach a quorum, and etcd cannot change its member count through this chart. Keep etcd.bundled.replicas=%d. To change the count, move the data: %s. Or, only if this etcd's data may be lost (it holds every table's catalog and commit log), delete the StatefulSet and its claims (kubectl delete statefulset -n %s %s; kubectl delete pvc -n %s %s) and upgrade again." $want $ns $name $had $want $had $snapshot $ns $name $ns (join " " $claims)) -}}
  {{- end -}}
{{- else -}}
  {{- $prefix := printf "data-%s-" $name -}}
  {{- $left := list -}}
  {{- $stray := false -}}
  {{- range $claim := (lookup "v1" "PersistentVolumeClaim" $ns "").items | default list -}}
    {{- $ordinal := trimPrefix $prefix $claim.metadata.name -}}
    {{- if and (hasPrefix $prefix $claim.metadata.name) (regexMatch "^[0-9]+$" $ordinal) -}}
      {{- $left = append $left $claim.metadata.name -}}
      {{- if ge (atoi $ordinal) $want }}{{ $stray = true }}{{ end -}}
    {{- end -}}
  {{- end -}}
  {{- if and $left (or $stray (ne (len $left) $want)) -}}
    {{- fail (printf "etcd.bundled.replicas is %d, but claims of an earlier bundled etcd of another size are left in %s (%s): their volumes keep that etcd's membership, which %d members could never form. To keep that data, install with the member count it was created with (one claim per member, ordinals from 0), then, to change the count, %s. Or, only if that data may be lost (every table's catalog and commit log), delete the claims (kubectl delete pvc -n %s %s) and install again." $want $ns (join ", " $left) $want $snapshot $ns (join " " $left)) -}}
  {{- end -}}
{{- end -}}
{{- end -}}
