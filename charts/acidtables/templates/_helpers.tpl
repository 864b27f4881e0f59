{{/* Names and labels shared by every template. */}}
{{- define "acidtables.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "acidtables.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "acidtables.operatorSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "acidtables.etcdSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end -}}

{{- define "acidtables.operatorImage" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "acidtables.jobImage" -}}
{{- $repository := .Values.jobs.image.repository | default .Values.image.repository -}}
{{ $repository }}:{{ .Values.jobs.image.tag | default .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* etcd client URLs: the bundled members, or the external endpoints */}}
{{- define "acidtables.etcdEndpoints" -}}
{{- if .Values.etcd.bundled.enabled -}}
{{- $scheme := ternary "https" "http" .Values.etcd.bundled.tls.enabled -}}
{{- $name := printf "%s-etcd" (include "acidtables.fullname" .) -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.etcd.bundled.replicas) -}}
{{- $urls = append $urls (printf "%s://%s-%d.%s.%s.svc:2379" $scheme $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- end -}}
{{- end -}}

{{/* Namespaces that get a Role (empty watchNamespaces: the release namespace, for the Spark account) */}}
{{- define "acidtables.jobNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- join "," .Values.watchNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- /* The Secret with etcd's CA (and client certificate), or nothing when etcd is reached without TLS */ -}}
{{- define "acidtables.etcdTLSSecret" -}}
{{- if .Values.etcd.bundled.enabled -}}
{{- if .Values.etcd.bundled.tls.enabled }}{{ .Values.etcd.bundled.tls.secretName }}{{ end -}}
{{- else -}}
{{- .Values.etcd.external.tlsSecret -}}
{{- end -}}
{{- end }}
