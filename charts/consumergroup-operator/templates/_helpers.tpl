{{/* fullname is the prefix of every object's name: the release name, unless it already names the chart. */}}
{{- define "consumergroup-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "consumergroup-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "consumergroup-operator.labels" -}}
{{ include "consumergroup-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The node agent's pods, told apart from the operator's by their component. */}}
{{- define "consumergroup-operator.nodeAgentSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-agent
{{- end -}}

{{- define "consumergroup-operator.nodeAgentLabels" -}}
{{ include "consumergroup-operator.nodeAgentSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "consumergroup-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-controller-manager" (include "consumergroup-operator.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
metricsCertificate is where the metrics endpoint's certificate comes from: "" when there is no HTTPS
endpoint, "certSecret" for the user's metrics.certSecret, else metrics.certificate with auto resolved:
certManager, chart or selfSigned.
*/}}
{{- define "consumergroup-operator.metricsCertificate" -}}
{{- $m := .Values.metrics -}}
{{- $mode := $m.certificate | default "auto" -}}
{{- if not (has $mode (list "auto" "certManager" "chart" "selfSigned")) -}}
{{- fail (printf "metrics.certificate is %q: want auto, certManager, chart or selfSigned" $mode) -}}
{{- end -}}
{{- if and $m.enabled $m.secure -}}
{{- if $m.certSecret -}}
certSecret
{{- else if eq $mode "auto" -}}
{{- ternary "certManager" "chart" (.Capabilities.APIVersions.Has "cert-manager.io/v1") -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* metricsCertSecret is the Secret the operator's metrics certificate is mounted from; "" for none. */}}
{{- define "consumergroup-operator.metricsCertSecret" -}}
{{- $mode := include "consumergroup-operator.metricsCertificate" . -}}
{{- if eq $mode "certSecret" -}}
{{- .Values.metrics.certSecret -}}
{{- else if eq $mode "certManager" -}}
{{- include "consumergroup-operator.fullname" . }}-metrics-cert
{{- else if eq $mode "chart" -}}
{{- include "consumergroup-operator.fullname" . }}-metrics-chart-cert
{{- end -}}
{{- end -}}

{{/* metricsDNSNames are the metrics Service's names in the release namespace, which its certificate covers. */}}
{{- define "consumergroup-operator.metricsDNSNames" -}}
{{- $svc := printf "%s-metrics" (include "consumergroup-operator.fullname" .) -}}
{{- list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toYaml -}}
{{- end -}}
