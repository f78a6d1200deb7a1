{{/* The chart's name, nameOverride's when set: the app.kubernetes.io/name
label. */}}
{{- define "fleetcast-publisher.name" -}}
{{- .Values.nameOverride | default .Chart.Name -}}
{{- end }}

{{/* The name of every object: fullnameOverride, else the chart's name, as
in publisher/deploy — not prefixed by the release's, since one publisher
serves a namespace and Terraform's and kustomize's names agree with it. */}}
{{- define "fleetcast-publisher.fullname" -}}
{{- .Values.fullnameOverride | default (include "fleetcast-publisher.name" .) -}}
{{- end }}

{{/* The Kubernetes service account: serviceAccount.name, the one the
Workload Identity binding (Terraform's clusters.<c>.service_account)
names, else the objects' name. */}}
{{- define "fleetcast-publisher.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "fleetcast-publisher.fullname" .) -}}
{{- end }}

{{/* Labels of every object. */}}
{{- define "fleetcast-publisher.labels" -}}
{{ include "fleetcast-publisher.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* Labels that select the publisher's pods: publisher/deploy's, since
the objects' names are fixed (one publisher per namespace). */}}
{{- define "fleetcast-publisher.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fleetcast-publisher.name" . }}
app.kubernetes.io/part-of: fleetcast
{{- end }}

{{/* The image: by digest when one is given, else by tag (appVersion by default). */}}
{{- define "fleetcast-publisher.image" -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail (printf "image.digest %q: want sha256: and 64 hex digits" .Values.image.digest) -}}
{{- end -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The topic: fleet-events-<cluster> unless set. */}}
{{- define "fleetcast-publisher.topic" -}}
{{- .Values.topic | default (printf "fleet-events-%s" .Values.cluster) -}}
{{- end }}

{{/* k=v,k=v of a map, sorted by key. */}}
{{- define "fleetcast-publisher.pairs" -}}
{{- $pairs := list -}}
{{- range $k := keys . | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%s" $k (index $ $k)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end }}

{{/* Fails, naming the value, on what the publisher would refuse at start. */}}
{{- define "fleetcast-publisher.validate" -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" (.Values.cluster | toString)) -}}
{{- fail (printf "cluster %q: required, a DNS-1123 label (lower case letters, digits and '-', at most 63)" (.Values.cluster | toString)) -}}
{{- end -}}
{{- if and .Values.publish (not .Values.project) -}}
{{- fail "project: required to publish, the Google Cloud project of the topic (or publish: false, with informationService.enabled, to only serve this cluster's InformationService)" -}}
{{- end -}}
{{- $is := .Values.informationService -}}
{{- if and (not .Values.publish) (not $is.enabled) -}}
{{- fail "publish: false without informationService.enabled: the publisher would neither publish nor serve" -}}
{{- end -}}
{{- if and $is.enabled (not $is.plaintext) (not (has $is.tls.source (list "generated" "secret" "certManager"))) -}}
{{- fail (printf "informationService.tls.source %q: want generated, secret or certManager" $is.tls.source) -}}
{{- end -}}
{{- if and $is.enabled (not $is.plaintext) (eq $is.tls.source "secret") (not $is.tls.secretName) -}}
{{- fail "informationService.tls.secretName: required with tls.source secret, a Secret holding tls.crt, tls.key and ca.crt (the CA of the clients' certificates)" -}}
{{- end -}}
{{- if and $is.enabled (not $is.plaintext) (eq $is.tls.source "certManager") (not $is.tls.certManager.issuerRef.name) -}}
{{- fail "informationService.tls.certManager.issuerRef.name: required with tls.source certManager, the Issuer or ClusterIssuer of the server's certificate" -}}
{{- end -}}
{{- $id := .Values.identity -}}
{{- if not (has $id.type (list "gke" "workloadIdentityFederation" "none")) -}}
{{- fail (printf "identity.type %q: want gke, workloadIdentityFederation or none" $id.type) -}}
{{- end -}}
{{- if and (ne (include "fleetcast-publisher.identity" .) "none") (not (regexMatch "^[^@]+@[^@]+\\.iam\\.gserviceaccount\\.com$" ($id.serviceAccount | toString))) -}}
{{- fail (printf "identity.serviceAccount %q: required with identity.type %s, the Google service account's email (NAME@PROJECT.iam.gserviceaccount.com)" ($id.serviceAccount | toString) $id.type) -}}
{{- end -}}
{{- if and (eq (include "fleetcast-publisher.identity" .) "workloadIdentityFederation") (not (regexMatch "^//iam\\.googleapis\\.com/projects/[0-9]+/locations/global/workloadIdentityPools/[a-z0-9-]+/providers/[a-z0-9-]+$" ($id.workloadIdentityFederation.provider | toString))) -}}
{{- fail (printf "identity.workloadIdentityFederation.provider %q: want //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER (Terraform's publisher_chart_values output)" ($id.workloadIdentityFederation.provider | toString)) -}}
{{- end -}}
{{- if and $id.namespace (ne $id.namespace .Release.Namespace) -}}
{{- fail (printf "identity.namespace %q: the Workload Identity binding is for that namespace's service account, but the release is in %q; install with -n %s, or change the cluster's namespace in Terraform" $id.namespace .Release.Namespace $id.namespace) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$" (include "fleetcast-publisher.serviceAccountName" .)) -}}
{{- fail (printf "serviceAccount.name %q: a Kubernetes name (DNS-1123 subdomain)" .Values.serviceAccount.name) -}}
{{- end -}}
{{- if regexMatch "^REGION-|/PROJECT/" (.Values.image.repository | toString) -}}
{{- fail (printf "image.repository %q is the chart's placeholder: set it to your registry's fleetcast-publisher image, e.g. europe-west1-docker.pkg.dev/MY_PROJECT/fleetcast/fleetcast-publisher (Terraform's output publisher_image; its publisher_chart_values set it), after pushing the image there (make image, or make cloudbuild)" (.Values.image.repository | toString)) -}}
{{- end -}}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "serviceAccount.name: required with serviceAccount.create false, the existing account the publisher runs as (the chart binds its Roles to it)" -}}
{{- end -}}
{{- if and .Values.publish (not .Values.leaderElection.enabled) (gt (int .Values.replicas) 1) -}}
{{- fail (printf "replicas %d with leaderElection.enabled false: every replica would publish; enable leader election or run one" (int .Values.replicas)) -}}
{{- end -}}
{{- end }}

{{/* The Secret of InformationService's server certificate: the given one
(tls.source secret), or the chart's (generated, certManager). */}}
{{- define "fleetcast-publisher.informationSecret" -}}
{{- if eq .Values.informationService.tls.source "secret" -}}
{{- .Values.informationService.tls.secretName -}}
{{- else -}}
{{- include "fleetcast-publisher.name" . }}-information-tls
{{- end -}}
{{- end }}

{{/* How the publisher gets Google credentials: identity.type, or none
when it does not publish (it calls no Google API). */}}
{{- define "fleetcast-publisher.identity" -}}
{{- if .Values.publish -}}{{ .Values.identity.type }}{{- else -}}none{{- end -}}
{{- end }}

{{/* Where InformationService's TLS files are mounted. */}}
{{- define "fleetcast-publisher.informationDir" -}}
/etc/fleetcast/information-tls
{{- end }}

{{/* Where the Workload Identity Federation files are mounted. */}}
{{- define "fleetcast-publisher.wifDir" -}}
/var/run/secrets/fleetcast
{{- end }}
