{{/* Names, labels and the per-service wiring shared by every template. */}}

{{- define "truerun.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "truerun.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The four services, in one place: each gets a Deployment, a Service, and optional HPA,
PDB and NetworkPolicy. */}}
{{- define "truerun.components" -}}
coordinator capacity reconciler gateway
{{- end -}}

{{- define "truerun.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "truerun.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: truerun
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "coordinator"). */}}
{{- define "truerun.selectorLabels" -}}
app.kubernetes.io/name: {{ include "truerun.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "truerun.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "truerun.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "truerun.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "truerun.secretName" -}}
{{- default (printf "%s-secrets" (include "truerun.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* Secret keys each service reads, and the setting each key is. */}}
{{- define "truerun.secretKeys" -}}
coordinator: [database-url, runtime-tokens, api-tokens, service-token, webhook-key]
capacity: [database-url, redis-url, api-tokens]
reconciler: [database-url]
gateway: [api-tokens]
migrate: [database-url]
{{- end -}}

{{- define "truerun.secretEnv" -}}
database-url: TRUERUN_DATABASE_URL
redis-url: TRUERUN_REDIS_URL
runtime-tokens: TRUERUN_RUNTIME_TOKENS
api-tokens: TRUERUN_API_TOKENS
service-token: TRUERUN_SERVICE_TOKEN
webhook-key: TRUERUN_WEBHOOK_KEY
{{- end -}}

{{/* The secret values the chart renders, by key (empty values are left out). */}}
{{- define "truerun.secretValues" -}}
{{- $s := .Values.secrets -}}
{{- $databaseUrl := ternary "" $s.databaseUrl (not (empty $s.databaseUrlFrom.name)) -}}
{{- $all := dict "database-url" $databaseUrl "redis-url" $s.redisUrl "runtime-tokens" $s.runtimeTokens "api-tokens" $s.apiTokens "service-token" $s.serviceToken "webhook-key" $s.webhookKey -}}
{{- $present := dict -}}
{{- range $key, $value := $all -}}
{{- if $value -}}{{- $_ := set $present $key $value -}}{{- end -}}
{{- end -}}
{{- toYaml $present -}}
{{- end -}}

{{/* The secret keys one service mounts: those it reads that exist. Call with
(dict "root" $ "component" "coordinator"); returns a YAML list. */}}
{{- define "truerun.mountedSecretKeys" -}}
{{- $wanted := index (include "truerun.secretKeys" .root | fromYaml) .component -}}
{{- $keys := list -}}
{{- if .root.Values.secrets.existingSecret -}}
{{- range $wanted -}}
{{- if or (ne . "webhook-key") $.root.Values.secrets.existingSecretHasWebhookKey -}}
{{- $keys = append $keys . -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $present := include "truerun.secretValues" .root | fromYaml -}}
{{- if .root.Values.secrets.databaseUrlFrom.name -}}
{{- $_ := set $present "database-url" "from databaseUrlFrom" -}}
{{- end -}}
{{- range $wanted -}}
{{- if hasKey $present . -}}{{- $keys = append $keys . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $keys -}}
{{- end -}}

{{/* Env and volume wiring for secrets: one file per key under /etc/truerun/secrets. */}}
{{- define "truerun.secretFileEnv" -}}
{{- $env := include "truerun.secretEnv" .root | fromYaml -}}
{{- range (include "truerun.mountedSecretKeys" . | fromYamlArray) }}
- name: {{ index $env . }}_FILE
  value: /etc/truerun/secrets/{{ . }}
{{- end }}
{{- end -}}

{{/* With secrets.databaseUrlFrom, database-url is projected from that Secret next to the
other keys, so every service still reads one directory. */}}
{{- define "truerun.secretVolume" -}}
{{- $keys := include "truerun.mountedSecretKeys" . | fromYamlArray -}}
{{- $from := .root.Values.secrets.databaseUrlFrom -}}
{{- $secretName := .secretName | default (include "truerun.secretName" .root) -}}
{{- if and $from.name (has "database-url" $keys) }}
{{- $own := without $keys "database-url" }}
- name: secrets
  projected:
    defaultMode: 0440
    sources:
      {{- if $own }}
      - secret:
          name: {{ $secretName }}
          items:
            {{- range $own }}
            - key: {{ . }}
              path: {{ . }}
            {{- end }}
      {{- end }}
      - secret:
          name: {{ $from.name }}
          items:
            - key: {{ $from.key }}
              path: database-url
{{- else if $keys }}
- name: secrets
  secret:
    secretName: {{ $secretName }}
    defaultMode: 0440
    items:
      {{- range $keys }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
{{- end }}
{{- end -}}

{{/* TLS settings of one service (tls.enabled): its listeners serve tls.crt; the coordinator
and the gateway, gRPC clients of the other services, verify them with ca.crt; with
tls.clientAuth the gRPC services require client certificates and those two clients present
tls.crt. Call with (dict "root" $ "component" "coordinator"). */}}
{{- define "truerun.tlsEnv" -}}
{{- $tls := .root.Values.tls -}}
{{- if $tls.enabled }}
- name: TRUERUN_TLS_CERT_FILE
  value: /etc/truerun/tls/tls.crt
- name: TRUERUN_TLS_KEY_FILE
  value: /etc/truerun/tls/tls.key
{{- $client := has .component (list "coordinator" "gateway") }}
{{- if $client }}
- name: TRUERUN_TLS_CA_FILE
  value: /etc/truerun/tls/ca.crt
{{- end }}
{{- if $tls.clientAuth }}
{{- if ne .component "gateway" }}
- name: TRUERUN_TLS_CLIENT_CA_FILE
  value: /etc/truerun/tls/ca.crt
{{- end }}
{{- if $client }}
- name: TRUERUN_TLS_CLIENT_CERT_FILE
  value: /etc/truerun/tls/tls.crt
- name: TRUERUN_TLS_CLIENT_KEY_FILE
  value: /etc/truerun/tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The servers' certificate Secret: the one named, else the one the chart creates from the
PEM values (tls-secret.yaml). */}}
{{- define "truerun.tlsSecretName" -}}
{{- if .Values.tls.secretName -}}
{{- .Values.tls.secretName -}}
{{- else -}}
{{- $_ := required "tls.secretName, or tls.certificate, tls.key and tls.ca, are required with tls.enabled" .Values.tls.certificate -}}
{{- printf "%s-tls" (include "truerun.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Labels of the Services that carry a component's metrics once (not the headless twins),
what the ServiceMonitor selects. */}}
{{- define "truerun.metricsServiceLabels" -}}
app.kubernetes.io/name: {{ include "truerun.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
truerun.dev/metrics: "true"
{{- end -}}
