{{/* Chart name, truncated for label values. */}}
{{- define "shoal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped full name. */}}
{{- define "shoal.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "shoal.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The operator's resources are named <fullname>-operator. */}}
{{- define "shoal.operatorName" -}}
{{- printf "%s-operator" (include "shoal.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The CacheCluster's name. */}}
{{- define "shoal.clusterName" -}}
{{- default .Release.Name .Values.cluster.name | trunc 40 | trimSuffix "-" }}
{{- end }}

{{/* The password Secret's name. */}}
{{- define "shoal.passwordSecret" -}}
{{- default (printf "%s-password" (include "shoal.clusterName" .)) .Values.cluster.auth.existingSecret }}
{{- end }}

{{- define "shoal.operatorKeySecret" -}}
{{ include "shoal.operatorName" . }}-key
{{- end }}

{{- define "shoal.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Labels on everything. */}}
{{- define "shoal.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shoal
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The operator's selector labels: name, instance and component only (selectors never change).
     The name label is what the CacheClusters' NetworkPolicies let reach the nodes. */}}
{{- define "shoal.operatorSelectorLabels" -}}
app.kubernetes.io/name: shoal-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Container security settings of the restricted Pod Security profile. */}}
{{- define "shoal.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Pod security settings of the restricted profile (the image's nonroot user). */}}
{{- define "shoal.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The routers' TLS Secret: the existing one, or the one the chart makes (cert-manager or Helm). */}}
{{- define "shoal.tlsSecret" -}}
{{- default (printf "%s-tls" (include "shoal.clusterName" .)) .Values.cluster.tls.existingSecret }}
{{- end }}

{{/* The ACL file's Secret. */}}
{{- define "shoal.aclSecret" -}}
{{- default (printf "%s-users" (include "shoal.clusterName" .)) .Values.cluster.acl.existingSecret }}
{{- end }}
