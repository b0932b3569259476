{{/* Chart name, overridable with nameOverride. */}}
{{- define "svc-sidecar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name of the release's objects. Truncated to 55 characters so that
suffixed names (<fullname>-sidecar) stay within the 63 allowed for labels and DNS.
*/}}
{{- define "svc-sidecar.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "svc-sidecar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "svc-sidecar.labels" -}}
helm.sh/chart: {{ include "svc-sidecar.chart" . }}
app.kubernetes.io/name: {{ include "svc-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selects the control-plane pods only: application pods carrying a sidecar have their own
labels, and must never receive the control plane's traffic.
*/}}
{{- define "svc-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "svc-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: control-plane
{{- end }}

{{- define "svc-sidecar.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "svc-sidecar.sidecarImage" -}}
{{- $repository := .Values.sidecar.image.repository | default .Values.image.repository }}
{{- $tag := .Values.sidecar.image.tag | default (.Values.image.tag | default .Chart.AppVersion) }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}

{{/* The Secret holding SVC_MASTER_KEY and SVC_API_KEY: the given one, or the chart's. */}}
{{- define "svc-sidecar.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "svc-sidecar.fullname" .) }}
{{- end }}

{{- define "svc-sidecar.claimName" -}}
{{- .Values.persistence.existingClaim | default (printf "%s-data" (include "svc-sidecar.fullname" .)) }}
{{- end }}

{{/*
How many control-plane instances: controlPlane.replicas, else 2 on PostgreSQL and 1 on
SQLite. On SQLite anything but 1 fails the render: two processes writing one SQLite file
would corrupt it, and the ReadWriteOnce claim could not be mounted twice anyway.
*/}}
{{- define "svc-sidecar.replicas" -}}
{{- $replicas := .Values.controlPlane.replicas }}
{{- if kindIs "invalid" $replicas }}
{{- $replicas = 1 }}
{{- if .Values.postgres.existingSecret }}
{{- $replicas = 2 }}
{{- end }}
{{- end }}
{{- $replicas = int $replicas }}
{{- if lt $replicas 0 }}
{{- fail (printf "controlPlane.replicas is %d: it cannot be negative" $replicas) }}
{{- end }}
{{- if and (ne $replicas 1) (not .Values.postgres.existingSecret) }}
{{- fail (printf "controlPlane.replicas is %d, but the store is SQLite (postgres.existingSecret is not set): the control plane on SQLite is exactly one instance. Set postgres.existingSecret to run several instances on one PostgreSQL database." $replicas) }}
{{- end }}
{{- $replicas }}
{{- end }}

{{/*
"true" when the PodDisruptionBudget is rendered: controlPlane.pdb.enabled, or when unset,
whenever there is more than one instance.
*/}}
{{- define "svc-sidecar.pdbEnabled" -}}
{{- $enabled := .Values.controlPlane.pdb.enabled }}
{{- if kindIs "invalid" $enabled }}
{{- $enabled = gt (int (include "svc-sidecar.replicas" .)) 1 }}
{{- end }}
{{- if $enabled }}true{{ end }}
{{- end }}

{{- define "svc-sidecar.controlPlaneUrl" -}}
{{- .Values.sidecar.controlPlaneUrl | default (printf "http://%s.%s.svc:%d" (include "svc-sidecar.fullname" .) .Release.Namespace (int .Values.service.port)) }}
{{- end }}

{{/*
The control plane's svc.yaml: `config` from the values plus the keys the chart owns
(listeners, the store, master key file), which the values may not set. The store is the
SQLite file on the data volume, or with postgres.existingSecret the PostgreSQL database
whose URL the container reads from that Secret as SVC_STORE_URL (the service interpolates
it: the URL and its password never appear in the ConfigMap).
*/}}
{{- define "svc-sidecar.config" -}}
{{- $config := deepCopy (.Values.config | default dict) }}
{{- range $section := list "store" "keys" }}
{{- if hasKey $config $section }}
{{- fail (printf "config.%s is set by the chart (the store is the SQLite file on the data volume, or the database of postgres.existingSecret); remove it from your values" $section) }}
{{- end }}
{{- end }}
{{- if and .Values.postgres.existingSecret (not .Values.postgres.urlKey) }}
{{- fail "postgres.urlKey must name the key of postgres.existingSecret that holds the database URL" }}
{{- end }}
{{- $server := $config.server | default dict }}
{{- range $key := list "listen" "admin_listen" }}
{{- if hasKey $server $key }}
{{- fail (printf "config.server.%s is set by the chart from containerPorts; remove it from your values" $key) }}
{{- end }}
{{- end }}
{{- $_ := set $server "listen" (printf "0.0.0.0:%d" (int .Values.containerPorts.http)) }}
{{- $_ := set $server "admin_listen" (printf "0.0.0.0:%d" (int .Values.containerPorts.admin)) }}
{{- $_ := set $config "server" $server }}
{{- if .Values.postgres.existingSecret }}
{{- $_ := set $config "store" (dict "url" "${SVC_STORE_URL}") }}
{{- else }}
{{- $_ := set $config "store" (dict "path" "/app/data/svc.db") }}
{{- end }}
{{- $_ := set $config "keys" (dict "master_key_file" "/app/data/master.key") }}
{{- toYaml $config }}
{{- end }}

{{/*
The svc.yaml of sidecars in application pods: state replicated from the control plane,
API on localhost only, admin listener on the pod IP for the kubelet.
*/}}
{{- define "svc-sidecar.sidecarConfig" -}}
{{- $config := dict
  "server" (dict
    "listen" (printf "127.0.0.1:%d" (int .Values.sidecar.ports.api))
    "admin_listen" (printf "0.0.0.0:%d" (int .Values.sidecar.ports.admin)))
  "store" (dict "path" "/app/data/svc.db")
  "keys" (dict "master_key_file" "/app/data/master.key")
  "state" (dict
    "source" "control-plane"
    "control_plane" (dict
      "url" (include "svc-sidecar.controlPlaneUrl" .)
      "api_key" "${SVC_CP_KEY}"
      "poll_interval" .Values.sidecar.pollInterval))
  "logging" (dict "level" .Values.sidecar.logLevel) }}
{{- if .Values.sidecar.relay.enabled }}
{{- $_ := set $config "relay" (dict
  "listen" (printf "0.0.0.0:%d" (int .Values.sidecar.ports.relay))
  "upstream" .Values.sidecar.relay.upstream
  "routes" .Values.sidecar.relay.routes) }}
{{- end }}
{{- with .Values.sidecar.egress }}
{{- $_ := set $config "egress" . }}
{{- end }}
{{- if .Values.sidecar.egressProxy.enabled }}
{{- $ca := dict "cert_file" "/app/egress-ca/egress-ca.pem" "key_file" "/app/data/egress-ca.key" }}
{{- if .Values.sidecar.egressProxy.caSecret }}
{{- $ca = dict "cert_file" "/app/egress-ca-secret/tls.crt" "key_file" "/app/egress-ca-secret/tls.key" }}
{{- end }}
{{- $_ := set $config "egress_proxy" (dict
  "listen" (printf "127.0.0.1:%d" (int .Values.sidecar.ports.egressProxy))
  "ca" $ca
  "unknown_hosts" .Values.sidecar.egressProxy.unknownHosts
  "hosts" .Values.sidecar.egressProxy.hosts) }}
{{- end }}
{{- toYaml $config }}
{{- end }}
