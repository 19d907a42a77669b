{{/*
Named templates shared by the umbrella chart and its subcharts. Helm's named
templates are global across a chart and its subcharts, so every subchart
renders its workload, Service, PodDisruptionBudget and HorizontalPodAutoscaler
from the definitions here and only its values differ. Inside a subchart "."
is the subchart's context: .Chart.Name is the service, .Values its values.
*/}}

{{/* cronmesh.prefix is "<release>" when the release name already says cronmesh, else "<release>-cronmesh". */}}
{{- define "cronmesh.prefix" -}}
{{- if contains "cronmesh" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-cronmesh" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* cronmesh.fullname names a service's objects: "<prefix>-<service>". */}}
{{- define "cronmesh.fullname" -}}
{{- printf "%s-%s" (include "cronmesh.prefix" .) .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* cronmesh.secretName is the Secret every service reads credentials from. */}}
{{- define "cronmesh.secretName" -}}
{{- .Values.global.secrets.existingSecret | default (printf "%s-secrets" (include "cronmesh.prefix" .)) -}}
{{- end -}}

{{/*
cronmesh.registryURL is where the services fetch the managed API keys:
global.keys.registryURL, else the chart's registry Service on its default
port, over https when the chart serves TLS.
*/}}
{{- define "cronmesh.registryURL" -}}
{{- $scheme := ternary "https" "http" (not (empty .Values.global.tls.secretName)) -}}
{{- .Values.global.keys.registryURL | default (printf "%s://%s-registry:8081" $scheme (include "cronmesh.prefix" .)) -}}
{{- end -}}

{{/*
cronmesh.historyURL is where the registry reads the executions that
RerunExecution re-runs: global.history.url, else the chart's history Service
on its default port, over https when the chart serves TLS; empty when
global.history.url is "off".
*/}}
{{- define "cronmesh.historyURL" -}}
{{- $scheme := ternary "https" "http" (not (empty .Values.global.tls.secretName)) -}}
{{- $url := .Values.global.history.url | default (printf "%s://%s-history:8084" $scheme (include "cronmesh.prefix" .)) -}}
{{- if ne $url "off" }}{{ $url }}{{ end -}}
{{- end -}}

{{/* cronmesh.jaegerName names the optional Jaeger's Deployment and Service. */}}
{{- define "cronmesh.jaegerName" -}}
{{- printf "%s-jaeger" (include "cronmesh.prefix" .) -}}
{{- end -}}

{{/* cronmesh.otlpEndpoint is global.otlpEndpoint, else the chart's Jaeger when enabled, else empty. */}}
{{- define "cronmesh.otlpEndpoint" -}}
{{- if .Values.global.otlpEndpoint -}}
{{- .Values.global.otlpEndpoint -}}
{{- else if .Values.global.jaeger.enabled -}}
{{- printf "%s:4317" (include "cronmesh.jaegerName" .) -}}
{{- end -}}
{{- end -}}

{{/*
cronmesh.autoscaled is "true" when a HorizontalPodAutoscaler owns the
replica count. Never for the trigger, whatever its values say: its node
count is chosen, since every membership change moves ring partitions.
*/}}
{{- define "cronmesh.autoscaled" -}}
{{- if and (ne .Chart.Name "trigger") (hasKey .Values "autoscaling") .Values.autoscaling.enabled -}}
true
{{- end -}}
{{- end -}}

{{- define "cronmesh.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cronmesh.labels" -}}
{{ include "cronmesh.selectorLabels" . }}
app.kubernetes.io/part-of: cronmesh
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* cronmesh.image is "[<registry>/]<repository>:<tag>", the tag defaulting to the appVersion. */}}
{{- define "cronmesh.image" -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.global.image.registry }}{{ $repo = printf "%s/%s" . $repo }}{{ end -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Values.global.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
cronmesh.env is a service's environment. Every CRONMESH_* variable is a flag
of the service (libs/config reads CRONMESH_<FLAG>); the others (PGPASSWORD,
AMQP_PASSWORD, POD_IP) are read by the PostgreSQL driver or only expanded by
Kubernetes into a CRONMESH_* value, and GOMEMLIMIT by the Go runtime. Credentials come only from the Secret.
*/}}
{{- define "cronmesh.env" -}}
{{- if hasKey .Values "upstreams" -}}
{{ include "cronmesh.consoleEnv" . }}
{{- else -}}
{{- $g := .Values.global -}}
{{- $secret := include "cronmesh.secretName" . -}}
- name: CRONMESH_LISTEN
  value: {{ printf ":%v" .Values.port | quote }}
- name: CRONMESH_LOG_LEVEL
  value: {{ .Values.logLevel | default $g.logLevel | quote }}
- name: CRONMESH_API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $g.secrets.keys.apiKeys }}
{{- /* The managed API keys: the registry reads them from its database, the
others poll it, authenticated with a configured key (the Secret's
registry-api-key when present, else the first plain admin key of api-keys). */}}
- name: CRONMESH_KEY_REFRESH
  value: {{ $g.keys.refresh | quote }}
{{- if ne .Chart.Name "registry" }}
- name: CRONMESH_REGISTRY_URL
  value: {{ include "cronmesh.registryURL" . | quote }}
- name: CRONMESH_REGISTRY_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $g.secrets.keys.registryApiKey }}
      optional: true
{{- if $g.tls.secretName }}
{{- /* The registry's certificate is the chart's own: trust the Secret's
CA, and show the service's certificate when the registry requires one. */}}
- name: CRONMESH_REGISTRY_CA_FILE
  value: /etc/cronmesh/tls/ca.crt
{{- if $g.tls.clientAuth }}
- name: CRONMESH_REGISTRY_CLIENT_CERT
  value: /etc/cronmesh/tls/tls.crt
- name: CRONMESH_REGISTRY_CLIENT_KEY
  value: /etc/cronmesh/tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- if eq .Chart.Name "registry" }}
{{- with include "cronmesh.historyURL" . }}
{{- /* RerunExecution reads the execution it re-runs from the history,
with the caller's key. */}}
- name: CRONMESH_HISTORY_URL
  value: {{ . | quote }}
{{- if $g.tls.secretName }}
- name: CRONMESH_HISTORY_CA_FILE
  value: /etc/cronmesh/tls/ca.crt
{{- if $g.tls.clientAuth }}
- name: CRONMESH_HISTORY_CLIENT_CERT
  value: /etc/cronmesh/tls/tls.crt
- name: CRONMESH_HISTORY_CLIENT_KEY
  value: /etc/cronmesh/tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- end }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $g.secrets.keys.postgresPassword }}
- name: CRONMESH_POSTGRES_URL
  value: {{ include "cronmesh.postgresURL" . | quote }}
- name: AMQP_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $g.secrets.keys.amqpPassword }}
- name: CRONMESH_AMQP_URL
  value: {{ include "cronmesh.amqpURL" . | quote }}
{{- with $g.tls.secretName }}
- name: CRONMESH_TLS_CERT
  value: /etc/cronmesh/tls/tls.crt
- name: CRONMESH_TLS_KEY
  value: /etc/cronmesh/tls/tls.key
{{- if $g.tls.clientAuth }}
- name: CRONMESH_TLS_CLIENT_CA
  value: /etc/cronmesh/tls/ca.crt
{{- end }}
{{- end }}
{{- /* The services collect garbage at GOGC 200 (libs/servicemain); the
limit makes the collector work harder near the container's memory limit
instead of letting the heap reach it. */}}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      resource: limits.memory
{{- if get .Values "etcd" }}
- name: CRONMESH_ETCD_ENDPOINTS
  value: {{ join "," $g.etcd.endpoints | quote }}
{{- if $g.etcd.tls.secretName }}
- name: CRONMESH_ETCD_CA_FILE
  value: /etc/cronmesh/etcd-tls/ca.crt
{{- if $g.etcd.tls.clientCert }}
- name: CRONMESH_ETCD_CERT
  value: /etc/cronmesh/etcd-tls/tls.crt
- name: CRONMESH_ETCD_KEY
  value: /etc/cronmesh/etcd-tls/tls.key
{{- end }}
{{- end }}
{{- with $g.etcd.username }}
- name: CRONMESH_ETCD_USERNAME
  value: {{ . | quote }}
- name: CRONMESH_ETCD_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $g.secrets.keys.etcdPassword }}
{{- end }}
{{- end }}
{{- with include "cronmesh.otlpEndpoint" . }}
- name: CRONMESH_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if get .Values "podIdentity" }}
- name: CRONMESH_NODE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: CRONMESH_ADVERTISE
  value: {{ printf "$(POD_IP):%v" .Values.port | quote }}
{{- end }}
{{- if and (get .Values "amqpTargetPolicy") $g.amqpTargets.allow }}
- name: CRONMESH_TARGET_AMQP_ALLOW
  value: {{ join "," $g.amqpTargets.allow | quote }}
{{- end }}
{{- with get .Values "traceLinkTemplate" }}
- name: CRONMESH_TRACE_LINK_TEMPLATE
  value: {{ . | quote }}
{{- end }}
{{- range $name, $key := .Values.secretEnv }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
      optional: true
{{- end }}
{{- /* The rate limit (global) and the service's quotas, unless its
`config` sets the same flag; empty values keep the flag's default. */}}
{{- $limits := dict -}}
{{- with $g.rateLimit }}
{{- $_ := set $limits "rate-limit" .perKey -}}
{{- $_ := set $limits "rate-limit-namespaces" .namespaces -}}
{{- $_ := set $limits "rate-limit-keys" .maxKeys -}}
{{- end }}
{{- range $flag, $value := (get .Values "quotas" | default dict) }}
{{- $_ := set $limits $flag $value -}}
{{- end }}
{{- range $flag, $value := $limits }}
{{- if and (ne (toString $value) "") (not (hasKey ($.Values.config | default dict) $flag)) }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $value = int64 $value }}
{{- end }}
- name: {{ printf "CRONMESH_%s" ($flag | upper | replace "-" "_") }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- range $flag, $value := .Values.config }}
{{- /* Numbers from values files are float64: 2000000 would print as 2e+06. */}}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $value = int64 $value }}
{{- end }}
- name: {{ printf "CRONMESH_%s" ($flag | upper | replace "-" "_" | replace "." "_") }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
cronmesh.consoleEnv is the console's environment: its listener, and the
five services it forwards to (console.upstreams, else the chart's Services,
over https trusting the Secret's ca.crt with global.tls). No credential: the
console holds no key and reaches no database, broker or etcd.
*/}}
{{- define "cronmesh.consoleEnv" -}}
{{- $g := .Values.global -}}
{{- $scheme := ternary "https" "http" (not (empty $g.tls.secretName)) -}}
- name: CRONMESH_LISTEN
  value: {{ printf ":%v" .Values.port | quote }}
- name: CRONMESH_LOG_LEVEL
  value: {{ .Values.logLevel | default $g.logLevel | quote }}
{{- range $svc, $port := dict "registry" 8081 "trigger" 8082 "dispatcher" 8083 "history" 8084 "alerting" 8085 }}
- name: {{ printf "CRONMESH_%s_URL" (upper $svc) }}
  value: {{ index $.Values.upstreams $svc | default (printf "%s://%s-%s:%v" $scheme (include "cronmesh.prefix" $) $svc $port) | quote }}
{{- end }}
{{- if $g.tls.secretName }}
- name: CRONMESH_UPSTREAM_CA_FILE
  value: /etc/cronmesh/tls/ca.crt
- name: CRONMESH_TLS_CERT
  value: /etc/cronmesh/tls/tls.crt
- name: CRONMESH_TLS_KEY
  value: /etc/cronmesh/tls/tls.key
{{- if $g.tls.clientAuth }}
- name: CRONMESH_UPSTREAM_CLIENT_CERT
  value: /etc/cronmesh/tls/tls.crt
- name: CRONMESH_UPSTREAM_CLIENT_KEY
  value: /etc/cronmesh/tls/tls.key
{{- end }}
{{- end }}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      resource: limits.memory
{{- with include "cronmesh.otlpEndpoint" . }}
- name: CRONMESH_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- range $name, $key := .Values.secretEnv }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "cronmesh.secretName" $ }}
      key: {{ $key }}
      optional: true
{{- end }}
{{- range $flag, $value := .Values.config }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $value = int64 $value }}
{{- end }}
- name: {{ printf "CRONMESH_%s" ($flag | upper | replace "-" "_" | replace "." "_") }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/*
cronmesh.postgresURL is the PostgreSQL URL, without the password (PGPASSWORD
has it), with the CA file when global.postgres.ca names a Secret.
*/}}
{{- define "cronmesh.postgresURL" -}}
{{- $pg := .Values.global.postgres -}}
{{- printf "postgres://%s@%s:%v/%s?sslmode=%s" $pg.user $pg.host $pg.port $pg.database $pg.sslmode -}}
{{- with $pg.ca.secretName }}{{ printf "&sslrootcert=/etc/cronmesh/postgres-ca/%s" $pg.ca.key }}{{ end -}}
{{- end -}}

{{/*
cronmesh.amqpURL is the AMQP URL, the password spliced in by Kubernetes:
amqps with the CA file (amqp091's cacertfile) when global.rabbitmq.ca names a
Secret.
*/}}
{{- define "cronmesh.amqpURL" -}}
{{- $mq := .Values.global.rabbitmq -}}
{{- $scheme := ternary "amqps" $mq.scheme (not (empty $mq.ca.secretName)) -}}
{{- printf "%s://%s:$(AMQP_PASSWORD)@%s:%v/%s" $scheme $mq.user $mq.host $mq.port $mq.vhost -}}
{{- with $mq.ca.secretName }}{{ printf "?cacertfile=/etc/cronmesh/amqp-ca/%s" $mq.ca.key }}{{ end -}}
{{- end -}}

{{/*
cronmesh.secretVolumes is the YAML list of the Secrets a service mounts
read-only under /etc/cronmesh/<name>: its TLS certificate, the CAs of
PostgreSQL and RabbitMQ (not the console's: it reaches neither), and (with
etcd) etcd's TLS files.
*/}}
{{- define "cronmesh.secretVolumes" -}}
{{- $g := .Values.global -}}
{{- $volumes := list -}}
{{- with $g.tls.secretName }}{{ $volumes = append $volumes (dict "name" "tls" "secretName" .) }}{{ end -}}
{{- if not (hasKey .Values "upstreams") -}}
{{- with $g.postgres.ca.secretName }}{{ $volumes = append $volumes (dict "name" "postgres-ca" "secretName" .) }}{{ end -}}
{{- with $g.rabbitmq.ca.secretName }}{{ $volumes = append $volumes (dict "name" "amqp-ca" "secretName" .) }}{{ end -}}
{{- end -}}
{{- if get .Values "etcd" }}{{ with $g.etcd.tls.secretName }}{{ $volumes = append $volumes (dict "name" "etcd-tls" "secretName" .) }}{{ end }}{{ end -}}
{{- toYaml $volumes -}}
{{- end -}}

{{/* cronmesh.probe is a probe's handler: HTTPS GET of path with TLS, else grpc (readiness) or HTTP GET (liveness). */}}
{{- define "cronmesh.probe" -}}
{{- $ctx := index . 0 -}}{{- $path := index . 1 -}}
{{- if $ctx.Values.global.tls.secretName }}
httpGet:
  path: {{ $path }}
  port: grpc
  scheme: HTTPS
{{- else if eq $path "/readyz" }}
grpc:
  port: {{ $ctx.Values.port }}
{{- else }}
httpGet:
  path: {{ $path }}
  port: grpc
{{- end }}
{{- end -}}

{{/* cronmesh.deployment is a service's Deployment. */}}
{{- define "cronmesh.deployment" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "cronmesh.fullname" . }}
  labels:
    {{- include "cronmesh.labels" . | nindent 4 }}
spec:
  {{- if not (include "cronmesh.autoscaled" .) }}
  replicas: {{ .Values.replicaCount }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "cronmesh.selectorLabels" . | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "cronmesh.labels" . | nindent 8 }}
      {{- with .Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      automountServiceAccountToken: false
      {{- with .Values.global.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "cronmesh.selectorLabels" . | nindent 14 }}
      containers:
        - name: {{ .Chart.Name }}
          image: {{ include "cronmesh.image" . | quote }}
          imagePullPolicy: {{ .Values.global.image.pullPolicy }}
          args:
            {{- toYaml .Values.args | nindent 12 }}
          ports:
            - name: grpc
              containerPort: {{ .Values.port }}
              protocol: TCP
          env:
            {{- include "cronmesh.env" . | nindent 12 }}
          # Ready: grpc.health.v1 reports SERVING for the whole server (""),
          # which a service does only once it can do its work (the trigger:
          # holds its partitions; consumers: subscribed). With TLS, /readyz
          # says the same over HTTPS: the kubelet's grpc probe has no TLS.
          readinessProbe:
            {{- include "cronmesh.probe" (list . "/readyz") | trim | nindent 12 }}
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: 3
          # Alive: /healthz on the same port answers 200 whenever the process
          # serves at all, so a node that is merely not ready (waiting for
          # etcd or the broker) is taken out of the Service, not restarted.
          livenessProbe:
            {{- include "cronmesh.probe" (list . "/healthz") | trim | nindent 12 }}
            initialDelaySeconds: 10
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 6
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          securityContext:
            runAsNonRoot: true
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- range $v := include "cronmesh.secretVolumes" . | fromYamlArray }}
            - name: {{ $v.name }}
              mountPath: /etc/cronmesh/{{ $v.name }}
              readOnly: true
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- range $v := include "cronmesh.secretVolumes" . | fromYamlArray }}
        - name: {{ $v.name }}
          secret:
            secretName: {{ $v.secretName }}
        {{- end }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* cronmesh.service is a service's ClusterIP Service: Connect, gRPC and gRPC-Web over h2c (or HTTPS with global.tls) on one port. */}}
{{- define "cronmesh.service" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "cronmesh.fullname" . }}
  labels:
    {{- include "cronmesh.labels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "cronmesh.selectorLabels" . | nindent 4 }}
  ports:
    - name: grpc
      port: {{ .Values.port }}
      targetPort: grpc
      protocol: TCP
      appProtocol: {{ ternary "https" "kubernetes.io/h2c" (not (empty .Values.global.tls.secretName)) }}
{{- end -}}

{{/* cronmesh.pdb is a service's PodDisruptionBudget. */}}
{{- define "cronmesh.pdb" -}}
{{- if .Values.pdb.enabled -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "cronmesh.fullname" . }}
  labels:
    {{- include "cronmesh.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .Values.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "cronmesh.selectorLabels" . | nindent 6 }}
{{- end -}}
{{- end -}}

{{/* cronmesh.hpa is a stateless service's HorizontalPodAutoscaler (CPU, optionally memory). */}}
{{- define "cronmesh.hpa" -}}
{{- if include "cronmesh.autoscaled" . -}}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "cronmesh.fullname" . }}
  labels:
    {{- include "cronmesh.labels" . | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "cronmesh.fullname" . }}
  minReplicas: {{ .Values.autoscaling.minReplicas }}
  maxReplicas: {{ .Values.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ .Values.autoscaling.targetCPUUtilizationPercentage }}
    {{- with .Values.autoscaling.targetMemoryUtilizationPercentage }}
    - type: Resource
      resource:
        name: memory
        target:
          type: Utilization
          averageUtilization: {{ . }}
    {{- end }}
{{- end -}}
{{- end -}}
