{{- /* The operator's rules, in deploy/base/rbac.yaml's order (a test keeps them equal): the namespaced
kinds' (namespaced: true) and the one cluster-scoped kind's, nodes, read for termination signals (cluster: true). */ -}}
{{- define "mpijob.operatorRules" -}}
{{- if .namespaced }}
- apiGroups: [kubeflow.org]
  resources: [mpijobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [kubeflow.org]
  resources: [mpijobs/status]
  verbs: [patch]
- apiGroups: [kubeflow.org]
  resources: [mpijobs/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [get, list, watch, create, patch]
# The per-job SSH Secret is created; no list/watch of Secrets (the operator cannot enumerate them). `get` by
# name is used only after a create answered AlreadyExists, to tell this job's own Secret (left by an operator
# killed before recording its uid) from someone else's, which stays a conflict (docs/security.md).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create]
# Per elastic job: the launcher's ServiceAccount, and a Role + RoleBinding that let it `get` only that job's
# ConfigMap (its discovery list). The operator can grant that because it holds `get` on configmaps itself.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, list, watch, create]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
{{- end }}
{{- if .cluster }}
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
{{- end }}
{{- if .namespaced }}
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch]
- apiGroups: [batch]
  resources: [jobs/status]
  verbs: [patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# Gang scheduling (--gang-scheduling): the PodGroup of each job, for Volcano or scheduler-plugins.
- apiGroups: [scheduling.volcano.sh, scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [get, list, watch, create, patch, delete]
{{- end }}
{{- end -}}

{{- /* "true" when the namespaced rules go to a Role per watched namespace, "" otherwise. */ -}}
{{- define "mpijob.rolesPerNamespace" -}}
{{- if and .Values.watchNamespaces .Values.rbac.namespaced }}true{{ end -}}
{{- end -}}
