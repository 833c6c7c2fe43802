{{/* Names and labels, the common Helm way (63 characters: the DNS label limit). */}}
{{- define "loopgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "loopgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "loopgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "loopgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "loopgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "loopgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "loopgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "loopgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Where the Redis TLS files are mounted (the store's ca_file/cert_file/key_file point here). */}}
{{- define "loopgate.tlsDir" -}}/etc/loopgate/redis-tls{{- end }}

{{/*
The gateway's `store` section, built from .Values.store with the gateway's own key names. The URL
comes from the Secret (as ${LOOPGATE_STORE_URL}) when urlSecretKey is set, so a password never
lands in the ConfigMap.
*/}}
{{- define "loopgate.storeConfig" -}}
{{- $s := .Values.store }}
{{- $url := $s.url }}
{{- if $s.urlSecretKey }}
{{- if not .Values.existingSecret }}
{{- fail "store.urlSecretKey needs existingSecret: the Secret that holds the Redis URL" }}
{{- end }}
{{- $url = "${LOOPGATE_STORE_URL}" }}
{{- else if not $url }}
{{- fail "store.url (or store.urlSecretKey) is required: replicas share continuations through Redis" }}
{{- else if hasPrefix "memory://" $url }}
{{- fail "store.url memory:// cannot be shared by replicas: use redis://, rediss:// or redis+cluster://" }}
{{- else if not (regexMatch "^(redis|rediss|redis\\+cluster)://" $url) }}
{{- fail (printf "store.url must start with redis://, rediss:// or redis+cluster://, got %q" $url) }}
{{- end }}
{{- $out := dict "url" $url "continuation_ttl_s" (int $s.continuation_ttl_s) }}
{{- if $s.cluster }}
{{- $_ := set $out "cluster" true }}
{{- end }}
{{- if $s.sentinel.master }}
{{- if $s.cluster }}
{{- fail "store.cluster and store.sentinel are exclusive: a Cluster has no Sentinel" }}
{{- end }}
{{- if not $s.sentinel.nodes }}
{{- fail "store.sentinel.nodes needs at least one host:port when store.sentinel.master is set" }}
{{- end }}
{{- $_ := set $out "sentinel" (dict "master" $s.sentinel.master "nodes" $s.sentinel.nodes) }}
{{- else if $s.sentinel.nodes }}
{{- fail "store.sentinel.master is required when store.sentinel.nodes is set" }}
{{- end }}
{{- if gt (int $s.wait_replicas) 0 }}
{{- $_ := set $out "wait_replicas" (int $s.wait_replicas) }}
{{- end }}
{{- range $key := list "wait_timeout_ms" "timeout_ms" "fail_open_ms" "tenant_max_stored_bytes" }}
{{- if not (kindIs "invalid" (index $s $key)) }}
{{- $_ := set $out $key (int64 (index $s $key)) }}
{{- end }}
{{- end }}
{{- if and (not (kindIs "invalid" $s.fail_open_ms)) (gt (int64 $s.fail_open_ms) (int64 (default 1000 $s.timeout_ms))) }}
{{- fail "store.fail_open_ms must not exceed store.timeout_ms (1000 when unset)" }}
{{- end }}
{{- if $s.tls.enabled }}
{{- if not $s.tls.secretName }}
{{- fail "store.tls.secretName is required when store.tls.enabled is true" }}
{{- end }}
{{- if ne (empty $s.tls.certKey) (empty $s.tls.keyKey) }}
{{- fail "store.tls.certKey and store.tls.keyKey go together (a client certificate needs its key)" }}
{{- end }}
{{- $dir := include "loopgate.tlsDir" . }}
{{- $tls := dict }}
{{- if $s.tls.caKey }}
{{- $_ := set $tls "ca_file" (printf "%s/%s" $dir $s.tls.caKey) }}
{{- end }}
{{- if $s.tls.certKey }}
{{- $_ := set $tls "cert_file" (printf "%s/%s" $dir $s.tls.certKey) }}
{{- $_ := set $tls "key_file" (printf "%s/%s" $dir $s.tls.keyKey) }}
{{- end }}
{{- if eq $s.tls.checkHostname false }}
{{- $_ := set $tls "check_hostname" false }}
{{- end }}
{{- $_ := set $out "tls" $tls }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* The whole gateway config: .Values.config plus the chart-owned server address and store. */}}
{{- define "loopgate.gatewayConfig" -}}
{{- if hasKey .Values.config "store" }}
{{- fail "set the store under .Values.store, not .Values.config.store" }}
{{- end }}
{{- $cfg := deepCopy .Values.config }}
{{- $server := merge (dict "host" "0.0.0.0" "port" (int .Values.containerPort)) (default (dict) $cfg.server) }}
{{- $_ := set $cfg "server" $server }}
{{- $_ := set $cfg "store" (include "loopgate.storeConfig" . | fromYaml) }}
{{- toYaml $cfg }}
{{- end }}
