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

{{- /* No image is published from this repository: without image.repository an install would sit in
ImagePullBackOff with nothing saying why, so the render fails and says what to set. */ -}}
{{- define "mpijob.image" -}}
{{- $repository := required "image.repository is not set: build the operator image (docs/image.md), push it to your registry and install with --set image.repository=REGISTRY/mpijob-operator (and image.tag or image.digest)" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
