{{/*
Names and labels, as MetalLB's chart (charts/metallb/templates/_helpers.tpl) makes them. The objects'
names stay fixed (ironlb-controller, ironlb-webhook-service, ...): the binaries and config/ name them,
and there is one ironlb per cluster (the CRDs, ClusterRoles and webhooks are cluster-wide).
*/}}

{{/* ironlb.name is app.kubernetes.io/name. */}}
{{- define "ironlb.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* ironlb.chart is the helm.sh/chart label: name-version. */}}
{{- define "ironlb.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* ironlb.labels go on every object the chart renders. */}}
{{- define "ironlb.labels" -}}
helm.sh/chart: {{ include "ironlb.chart" . }}
{{ include "ironlb.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
ironlb.selectorLabels: MetalLB's chart's selector labels. The workloads' selectors themselves stay
app=ironlb,component=<role> (config/, the PodMonitors, the e2e tests and the alerting rules' job label
select by them, and a selector cannot change in an upgrade); these labels are added to their pods.
*/}}
{{- define "ironlb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ironlb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* ironlb.componentLabels (dict "root" $ "component" "speaker"): the labels of one role's objects. */}}
{{- define "ironlb.componentLabels" -}}
{{ include "ironlb.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* ironlb.image (dict "root" $ "repository" ...): repository:tag, the tag defaulting to appVersion. */}}
{{- define "ironlb.image" -}}
{{- printf "%s:%s" .repository (default .root.Chart.AppVersion .root.Values.image.tag) }}
{{- end }}

{{/*
ironlb.podLabels (dict "root" $ "component" "speaker"): the labels of one role's pods, as MetalLB's
chart gives them: no chart or app version, so that a chart bump alone rolls no pod.
*/}}
{{- define "ironlb.podLabels" -}}
{{ include "ironlb.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
