{{/* The chart's name. */}}
{{- define "cohort.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Names of the release's objects: "<release>-cohort-operator", or "cohort-operator" when the release is "cohort". */}}
{{- define "cohort.fullname" -}}
{{- if eq .Release.Name .Chart.Name -}}
{{- printf "%s-operator" .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s-operator" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels selecting the operator's pods. */}}
{{- define "cohort.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cohort.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "cohort.labels" -}}
{{ include "cohort.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: cohort
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "cohort.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cohort.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator's rules on jobs and their children: tests/charts/check_chart.py keeps them equal to manifests/operator/rbac.yaml. */}}
{{- define "cohort.jobRules" -}}
# Watch jobs; delete a finished job when its ttlSecondsAfterFinished passes.
- apiGroups: ["cohort.dev"]
  resources: ["distributedjobs"]
  verbs: ["get", "list", "watch", "delete"]
# One status write per reconcile pass (PUT on the status subresource).
- apiGroups: ["cohort.dev"]
  resources: ["distributedjobs/status"]
  verbs: ["update"]
# The gang: created per restart attempt, listed and watched, deleted on restart, suspend or failure;
# a hot spare that takes a slot is labelled with it (patch).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Hot spares of a job with a Kueue topology annotation: the nodes' topology labels.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
# The headless Service and the job's token Secret (read back for the attempt hub of a job
# that restarts in place).
- apiGroups: [""]
  resources: ["services", "secrets"]
  verbs: ["get", "create", "delete"]
# An Event for every transition.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# spec.scheduling.podGroup: one PodGroup per restart attempt (scheduler-plugins, Volcano,
# Kubernetes' workload-aware scheduling).
- apiGroups: ["scheduling.x-k8s.io", "scheduling.volcano.sh", "scheduling.k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "create", "delete"]
{{- end -}}

{{/* Labels of a monitoring object: the chart's, component "monitoring", then the given extra labels (which win). Call with (dict "ctx" $ "extra" LABELS). */}}
{{- define "cohort.monitoringLabels" -}}
{{- $base := include "cohort.labels" .ctx | fromYaml -}}
{{- $_ := set $base "app.kubernetes.io/component" "monitoring" -}}
{{- toYaml (merge (dict) (.extra | default dict) $base) -}}
{{- end -}}
