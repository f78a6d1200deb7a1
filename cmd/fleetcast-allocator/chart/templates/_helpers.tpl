{{/* The chart's name, nameOverride's when set: the app.kubernetes.io/name
label. */}}
{{- define "fleetcast-allocator.name" -}}
{{- .Values.nameOverride | default .Chart.Name -}}
{{- end }}

{{/* The name of every object: fullnameOverride, else the chart's name. */}}
{{- define "fleetcast-allocator.fullname" -}}
{{- .Values.fullnameOverride | default (include "fleetcast-allocator.name" .) -}}
{{- end }}

{{/* The Kubernetes service account: serviceAccount.name, else the
objects' name. */}}
{{- define "fleetcast-allocator.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "fleetcast-allocator.fullname" .) -}}
{{- end }}

{{/* Labels of every object. */}}
{{- define "fleetcast-allocator.labels" -}}
{{ include "fleetcast-allocator.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* Labels that select the allocator's pods. */}}
{{- define "fleetcast-allocator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fleetcast-allocator.name" . }}
app.kubernetes.io/part-of: fleetcast
{{- end }}

{{/* The image: by digest when one is given, else by tag (appVersion by
default). */}}
{{- define "fleetcast-allocator.image" -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail (printf "image.digest %q: want sha256: and 64 hex digits" .Values.image.digest) -}}
{{- end -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The server certificate's Secret. */}}
{{- define "fleetcast-allocator.tlsSecret" -}}
{{- if eq .Values.tls.source "secret" -}}
{{ .Values.tls.secretName }}
{{- else -}}
{{ include "fleetcast-allocator.fullname" . }}-tls
{{- end -}}
{{- end }}

{{/* The client CAs' Secret: the generated server Secret's ca.crt, or
tls.clientCASecretName. */}}
{{- define "fleetcast-allocator.clientCASecret" -}}
{{- if eq .Values.tls.source "secret" -}}
{{ .Values.tls.clientCASecretName }}
{{- else -}}
{{ include "fleetcast-allocator.fullname" . }}-client-ca
{{- end -}}
{{- end }}

{{/* The Secrets the policies name (connectionInfo.secretName), sorted and
once each, as a list in JSON. */}}
{{- define "fleetcast-allocator.clusterSecrets" -}}
{{- $names := list -}}
{{- range .Values.policies -}}
{{- $name := ((.spec | default dict).connectionInfo | default dict).secretName | default "" -}}
{{- if $name -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- end -}}
{{- $names | uniq | sortAlpha | toJson -}}
{{- end }}

{{/* GOMEMLIMIT: 90% of limits.memory (a quantity in Mi or Gi), so that
the collector works before the kernel kills the container; empty when the
limit is not one of those. */}}
{{- define "fleetcast-allocator.goMemLimit" -}}
{{- $m := ((.Values.resources | default dict).limits | default dict).memory | default "" | toString -}}
{{- if regexMatch "^[0-9]+Mi$" $m -}}
{{ div (mul (trimSuffix "Mi" $m | int) 9) 10 }}MiB
{{- else if regexMatch "^[0-9]+Gi$" $m -}}
{{ div (mul (trimSuffix "Gi" $m | int) 9216) 10 }}MiB
{{- end -}}
{{- end }}

{{/* Fails, naming the value, on what the allocator would refuse at start. */}}
{{- define "fleetcast-allocator.validate" -}}
{{- if not .Values.project -}}
{{- fail "project: required, the Google Cloud project of fleetcast's Firestore database" -}}
{{- end -}}
{{- if not .Values.policies -}}
{{- fail "policies: required, your GameServerAllocationPolicies (kubectl get gameserverallocationpolicies -o yaml), one per cluster" -}}
{{- end -}}
{{- range $i, $p := .Values.policies -}}
{{- if or (ne ($p.apiVersion | toString) "multicluster.agones.dev/v1") (ne ($p.kind | toString) "GameServerAllocationPolicy") -}}
{{- fail (printf "policies[%d]: apiVersion %q, kind %q: want multicluster.agones.dev/v1 GameServerAllocationPolicy" $i ($p.apiVersion | toString) ($p.kind | toString)) -}}
{{- end -}}
{{- $ci := ($p.spec | default dict).connectionInfo | default dict -}}
{{- if not $ci.clusterName -}}
{{- fail (printf "policies[%d]: spec.connectionInfo.clusterName: required, the cluster's name in fleetcast" $i) -}}
{{- end -}}
{{- if not $ci.secretName -}}
{{- fail (printf "policies[%d] (cluster %s): spec.connectionInfo.secretName: required, the Secret of the client certificate its agones-allocator trusts" $i $ci.clusterName) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.tls.source (list "generated" "secret")) -}}
{{- fail (printf "tls.source %q: want generated or secret" (.Values.tls.source | toString)) -}}
{{- end -}}
{{- if and (eq .Values.tls.source "secret") (not .Values.tls.secretName) -}}
{{- fail "tls.secretName: required with tls.source secret, a Secret holding the server's tls.crt and tls.key" -}}
{{- end -}}
{{- if and (eq .Values.tls.source "secret") (not .Values.tls.disableMTLS) (not .Values.tls.clientCASecretName) -}}
{{- fail "tls.clientCASecretName: required with tls.source secret (unless tls.disableMTLS), a Secret of the CAs whose client certificates are accepted" -}}
{{- end -}}
{{- $repo := .Values.image.repository | toString -}}
{{- if or (hasPrefix "REGION-" $repo) (contains "/PROJECT/" $repo) -}}
{{- fail (printf "image.repository %q is the chart's placeholder: set your Artifact Registry repository's fleetcast-allocator (REGION-docker.pkg.dev/PROJECT/fleetcast/fleetcast-allocator, as make cloudbuild pushes it)" $repo) -}}
{{- end -}}
{{- if and (eq .Values.identity.type "gke") (not (regexMatch "^[^@]+@[^@]+\\.iam\\.gserviceaccount\\.com$" (.Values.identity.serviceAccount | toString))) -}}
{{- fail (printf "identity.serviceAccount %q: required with identity.type gke, the Google service account's email (NAME@PROJECT.iam.gserviceaccount.com), which reads Firestore" (.Values.identity.serviceAccount | toString)) -}}
{{- end -}}
{{- if not (has .Values.identity.type (list "gke" "none")) -}}
{{- fail (printf "identity.type %q: want gke or none" (.Values.identity.type | toString)) -}}
{{- end -}}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "serviceAccount.name: required with serviceAccount.create false" -}}
{{- end -}}
{{- end }}
