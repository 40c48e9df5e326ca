{{/* The release's full name, 63 characters at most (a DNS label). */}}
{{- define "dra-extender.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dra-extender.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dra-extender.labels" -}}
{{ include "dra-extender.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The extender image. Nothing publishes it: an unset repository fails the install with the way to build it. */}}
{{- define "dra-extender.image" -}}
{{- if not .Values.extender.image.repository -}}
{{- fail "extender.image.repository is not set, and no registry publishes the dra-extender image. Build and push it from the repository's Dockerfile first: docker build -t REGISTRY/dra-extender:TAG . && docker push REGISTRY/dra-extender:TAG, then install with --set extender.image.repository=REGISTRY/dra-extender --set extender.image.tag=TAG (docs/operator-guide.md, Install)" -}}
{{- end -}}
{{- printf "%s:%s" .Values.extender.image.repository (.Values.extender.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* kube-scheduler of the cluster's minor (upstream supports no skew of kube-scheduler against its API server):
scheduler.image.tag when set, else scheduler.image.tagByMinor at .Capabilities.KubeVersion's minor (the API server's
at install and upgrade; `helm template` needs --kube-version). A minor without an entry fails the install, never a guess. */}}
{{- define "dra-extender.schedulerTag" -}}
{{- $image := .Values.scheduler.image -}}
{{- $tag := $image.tag -}}
{{- if not $tag -}}
{{- $kube := .Capabilities.KubeVersion -}}
{{- $minor := printf "%s.%s" $kube.Major ($kube.Minor | trimSuffix "+") -}}
{{- $tag = index ($image.tagByMinor | default dict) $minor -}}
{{- if not $tag -}}
{{- fail (printf "scheduler.image.tagByMinor has no kube-scheduler for Kubernetes %s (the cluster reports %s), and scheduler.image.tag is not set. kube-scheduler must be the cluster's minor: dra-extender supports 1.34 to 1.36 (docs/operator-guide.md, Supported versions); for another minor set scheduler.image.tag=v%s.P (the cluster's patch release), or with helm template pass --kube-version" $minor $kube.Version $minor) -}}
{{- end -}}
{{- end -}}
{{- $tag -}}
{{- end -}}

{{- define "dra-extender.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dra-extender.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the schedulerName webhook never sees: the release's own (its pods must start while the
webhook is down) and webhook.excludedNamespaces. A JSON list: the webhook's namespaceSelector and both
containers' flags read the same one. */}}
{{- define "dra-extender.webhookExcludedNamespaces" -}}
{{- uniq (prepend (.Values.webhook.excludedNamespaces | default list) .Release.Namespace) | toJson -}}
{{- end -}}

{{/* The controllers' pods (`dra-extender controllers`): a name of their own, so that no selector of the
scheduler's pods (Deployment, PodDisruptionBudget, Services) ever matches them, nor theirs the scheduler's. */}}
{{- define "dra-extender.controllersFullname" -}}
{{- printf "%s-controllers" (include "dra-extender.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dra-extender.controllersSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-controllers
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controllers
{{- end -}}

{{- define "dra-extender.controllersLabels" -}}
{{ include "dra-extender.controllersSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "dra-extender.controllersServiceAccountName" -}}
{{- if .Values.controllers.serviceAccount.create -}}
{{- default (include "dra-extender.controllersFullname" .) .Values.controllers.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.controllers.serviceAccount.name -}}
{{- end -}}
{{- end -}}
