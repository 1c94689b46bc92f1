{{- define "mpijob.name" -}}mpijob-operator{{- end -}}

{{- define "mpijob.labels" -}}
app.kubernetes.io/name: mpijob-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: mpijob
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "mpijob.selector" -}}
app.kubernetes.io/name: mpijob-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mpijob.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
