package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

var (
	chartDir = filepath.Join(root, "deploy", "helm", "cronmesh")
	helmBin  = filepath.Join(root, "bin", "helm")
)

// stateless are the services that are autoscaled when asked; the trigger
// never is (its node count is chosen: membership changes move partitions).
var stateless = []string{"registry", "dispatcher", "history", "alerting", "console"}

// helperEnv are the variables besides CRONMESH_* flags a container may get:
// PGPASSWORD is read by the PostgreSQL driver, GOMEMLIMIT by the Go runtime;
// the others are only expanded by Kubernetes into a CRONMESH_* value.
var helperEnv = []string{"PGPASSWORD", "AMQP_PASSWORD", "POD_IP", "GOMEMLIMIT"}

type (
	meta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	object struct {
		Kind     string `yaml:"kind"`
		Metadata meta   `yaml:"metadata"`
		node     *yaml.Node
	}
	labelSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	securityContext struct {
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		Privileged               *bool  `yaml:"privileged"`
	}
	probe struct {
		GRPC *struct {
			Port int `yaml:"port"`
		} `yaml:"grpc"`
		HTTPGet *struct {
			Path   string `yaml:"path"`
			Port   any    `yaml:"port"`
			Scheme string `yaml:"scheme"`
		} `yaml:"httpGet"`
		TCPSocket *struct {
			Port any `yaml:"port"`
		} `yaml:"tcpSocket"`
		Exec *struct{} `yaml:"exec"`
	}
	envVar struct {
		Name      string  `yaml:"name"`
		Value     *string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Key      string `yaml:"key"`
				Optional bool   `yaml:"optional"`
			} `yaml:"secretKeyRef"`
			ConfigMapKeyRef *struct{} `yaml:"configMapKeyRef"`
			FieldRef        *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			ResourceFieldRef *struct {
				Resource string `yaml:"resource"`
			} `yaml:"resourceFieldRef"`
		} `yaml:"valueFrom"`
	}
	container struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env            []envVar `yaml:"env"`
		EnvFrom        []any    `yaml:"envFrom"`
		ReadinessProbe *probe   `yaml:"readinessProbe"`
		LivenessProbe  *probe   `yaml:"livenessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext *securityContext `yaml:"securityContext"`
		VolumeMounts    []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	volume struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	}
	workload struct {
		Spec struct {
			Replicas *int          `yaml:"replicas"`
			Selector labelSelector `yaml:"selector"`
			Template struct {
				Metadata meta `yaml:"metadata"`
				Spec     struct {
					SecurityContext *securityContext `yaml:"securityContext"`
					InitContainers  []container      `yaml:"initContainers"`
					Containers      []container      `yaml:"containers"`
					Volumes         []volume         `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	service struct {
		Spec struct {
			Selector map[string]string `yaml:"selector"`
			Ports    []struct {
				Name       string `yaml:"name"`
				Port       int    `yaml:"port"`
				TargetPort any    `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	pdb struct {
		Spec struct {
			Selector       labelSelector `yaml:"selector"`
			MinAvailable   any           `yaml:"minAvailable"`
			MaxUnavailable any           `yaml:"maxUnavailable"`
		} `yaml:"spec"`
	}
	hpa struct {
		Spec struct {
			ScaleTargetRef struct {
				Kind string `yaml:"kind"`
				Name string `yaml:"name"`
			} `yaml:"scaleTargetRef"`
			MinReplicas int `yaml:"minReplicas"`
			MaxReplicas int `yaml:"maxReplicas"`
		} `yaml:"spec"`
	}
	secret struct {
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
	}
)

func (o object) decode(t *testing.T, v any) {
	t.Helper()
	require.NoErrorf(t, o.node.Decode(v), "%s %s", o.Kind, o.Metadata.Name)
}

// rendered is what `helm template` printed, by kind.
type rendered struct {
	raw     string
	objects []object
}

func (r rendered) kind(kind string) []object {
	var out []object
	for _, o := range r.objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// byService returns the object of kind labelled as the cronmesh service svc.
func (r rendered) byService(kind, svc string) (object, bool) {
	for _, o := range r.kind(kind) {
		if o.Metadata.Labels["app.kubernetes.io/name"] == svc && o.Metadata.Labels["app.kubernetes.io/part-of"] == "cronmesh" {
			return o, true
		}
	}
	return object{}, false
}

// helm runs bin/helm with its own empty home, so nothing outside the test
// (no repositories, no plugins, no caches) takes part.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	_, err := os.Stat(helmBin)
	require.NoErrorf(t, err, "%s is missing: `make tools` installs it", helmBin)
	// go test caches a passing result until the files the test read
	// change; helm reads the chart in a process of its own, so the test
	// reads it too, to make the chart part of what the result depends on.
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "deploy", "helm"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		_, err = os.ReadFile(path)
		return err
	}))
	home := t.TempDir()
	cmd := exec.Command(helmBin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoErrorf(t, cmd.Run(), "helm %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}

func render(t *testing.T, release string, args ...string) rendered {
	t.Helper()
	out := helm(t, append([]string{"template", release, chartDir, "--namespace", "cronmesh"}, args...)...)
	r := rendered{raw: out}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if len(n.Content) == 0 {
			continue
		}
		o := object{node: &n}
		require.NoError(t, n.Decode(&o))
		if o.Kind == "" {
			continue
		}
		r.objects = append(r.objects, o)
	}
	require.NotEmpty(t, r.objects)
	return r
}

func TestHelmLint(t *testing.T) {
	t.Parallel()
	helm(t, "lint", "--strict", chartDir)
	helm(t, "lint", "--strict", chartDir, "-f", filepath.Join("testdata", "options.yaml"))
}

// TestChartDefaults renders the chart with its default values.
func TestChartDefaults(t *testing.T) {
	t.Parallel()
	r := render(t, "cm")
	checkWorkloads(t, r)
	checkServices(t, r, "cm-cronmesh-secrets")
	require.Empty(t, r.kind("HorizontalPodAutoscaler"), "autoscaling is off by default")

	var trig workload
	o, ok := r.byService("Deployment", "trigger")
	require.True(t, ok)
	o.decode(t, &trig)
	require.NotNil(t, trig.Spec.Replicas)
	require.GreaterOrEqual(t, *trig.Spec.Replicas, 2, "several trigger nodes by default")

	_, jaeger := r.byService("Deployment", "jaeger")
	require.False(t, jaeger, "Jaeger is off by default")
	for _, svc := range services {
		_, ok := env(t, r, svc)["CRONMESH_OTLP_ENDPOINT"]
		require.Falsef(t, ok, "%s exports spans although no collector is set", svc)
		_, ok = env(t, r, svc)["CRONMESH_TRACE_LINK_TEMPLATE"]
		require.Falsef(t, ok, "%s has a trace link template although none is set", svc)
		_, ok = env(t, r, svc)["CRONMESH_TARGET_AMQP_ALLOW"]
		require.Falsef(t, ok, "%s: no AMQP allow-list by default (each namespace has its own prefix only)", svc)
		limit := env(t, r, svc)["GOMEMLIMIT"].ValueFrom
		require.NotNilf(t, limit, "%s: the Go runtime knows the memory limit", svc)
		require.Equal(t, "limits.memory", limit.ResourceFieldRef.Resource)
		if svc == "console" {
			continue // it forwards calls, and each service limits them
		}
		require.Equalf(t, "50:100", value(env(t, r, svc)["CRONMESH_RATE_LIMIT"]), "%s: the rate limit of every key", svc)
		require.Equalf(t, "10000", value(env(t, r, svc)["CRONMESH_RATE_LIMIT_KEYS"]), svc)
		_, ok = env(t, r, svc)["CRONMESH_RATE_LIMIT_NAMESPACES"]
		require.Falsef(t, ok, "%s: no per-namespace rate by default", svc)
	}
	require.Equal(t, "10000", value(env(t, r, "registry")["CRONMESH_MAX_JOBS"]))
	require.Equal(t, "2", value(env(t, r, "trigger")["CRONMESH_MAX_BACKFILLS"]))

	// Verified PostgreSQL by default; no TLS on the listeners unless asked.
	for _, svc := range services {
		e := env(t, r, svc)
		for _, name := range []string{"CRONMESH_TLS_CERT", "CRONMESH_TLS_KEY", "CRONMESH_TLS_CLIENT_CA", "CRONMESH_UPSTREAM_CA_FILE"} {
			_, ok := e[name]
			require.Falsef(t, ok, "%s: %s set by default", svc, name)
		}
		if svc == "console" {
			continue
		}
		require.Equal(t, "postgres://cronmesh@postgresql:5432/cronmesh?sslmode=verify-full", value(e["CRONMESH_POSTGRES_URL"]))
		require.Equal(t, "amqp://cronmesh:$(AMQP_PASSWORD)@rabbitmq:5672/%2F", value(e["CRONMESH_AMQP_URL"]))
		for _, name := range []string{"CRONMESH_TLS_CERT", "CRONMESH_TLS_KEY", "CRONMESH_TLS_CLIENT_CA", "CRONMESH_ETCD_CA_FILE", "CRONMESH_ETCD_USERNAME"} {
			_, ok := e[name]
			require.Falsef(t, ok, "%s: %s set by default", svc, name)
		}
	}

	secrets := r.kind("Secret")
	require.Len(t, secrets, 1, "the chart creates the Secret when no existingSecret is given")
	require.Equal(t, "cm-cronmesh-secrets", secrets[0].Metadata.Name)

	// Without a history, the registry is told none.
	off := render(t, "cm", "--set", "history.enabled=false", "--set", "global.history.url=off")
	_, ok = env(t, off, "registry")["CRONMESH_HISTORY_URL"]
	require.False(t, ok, `global.history.url "off" gives the registry no history`)
}

// TestChartSecretValues: credentials given as values land in the Secret and
// nowhere else.
func TestChartSecretValues(t *testing.T) {
	t.Parallel()
	values := map[string]string{
		"apiKeys":              "team-a=cm_key_0123456789abcdef",
		"postgresPassword":     "pg-S3cret-value",
		"amqpPassword":         "mq-S3cret-value",
		"smtpPassword":         "smtp-S3cret-value",
		"webhookSigningSecret": "whsec_c2lnbmluZy1zZWNyZXQtdmFsdWU=",
		"registryApiKey":       "cm_registry_0123456789abcdef",
	}
	var args []string
	for k, v := range values {
		args = append(args, "--set-string", fmt.Sprintf("secrets.%s=%s", k, v))
	}
	r := render(t, "cronmesh", args...)
	checkServices(t, r, "cronmesh-secrets")
	var s secret
	secrets := r.kind("Secret")
	require.Len(t, secrets, 1)
	secrets[0].decode(t, &s)
	keys := map[string]string{
		"apiKeys": "api-keys", "postgresPassword": "postgres-password", "amqpPassword": "amqp-password",
		"smtpPassword": "smtp-password", "webhookSigningSecret": "webhook-signing-secret",
		"registryApiKey": "registry-api-key",
	}
	for k, v := range values {
		require.Equal(t, v, s.StringData[keys[k]], k)
		require.Equalf(t, 1, strings.Count(r.raw, v), "%s appears outside the Secret", k)
	}
}

// TestChartOptions renders the chart with an existing Secret, the Jaeger,
// autoscaling and per-service flags.
func TestChartOptions(t *testing.T) {
	t.Parallel()
	r := render(t, "prod", "-f", filepath.Join("testdata", "options.yaml"))
	checkWorkloads(t, r)
	checkServices(t, r, "cronmesh-credentials")
	require.Empty(t, r.kind("Secret"), "no Secret is created when existingSecret is given")

	// Autoscalers for the stateless services only, each on its Deployment,
	// which then leaves its replica count to the autoscaler.
	hpas := r.kind("HorizontalPodAutoscaler")
	require.Len(t, hpas, len(stateless))
	for _, svc := range stateless {
		o, ok := r.byService("HorizontalPodAutoscaler", svc)
		require.Truef(t, ok, "no HorizontalPodAutoscaler for %s", svc)
		var h hpa
		o.decode(t, &h)
		d, _ := r.byService("Deployment", svc)
		require.Equal(t, "Deployment", h.Spec.ScaleTargetRef.Kind)
		require.Equal(t, d.Metadata.Name, h.Spec.ScaleTargetRef.Name)
		require.GreaterOrEqual(t, h.Spec.MinReplicas, 2)
		require.Greater(t, h.Spec.MaxReplicas, h.Spec.MinReplicas)
		var w workload
		d.decode(t, &w)
		require.Nilf(t, w.Spec.Replicas, "%s: replicas are the autoscaler's", svc)
	}
	_, ok := r.byService("HorizontalPodAutoscaler", "trigger")
	require.False(t, ok, "the trigger is never autoscaled")

	// The console's Ingress: the host, TLS at the Ingress, the console's
	// Service and port.
	ing, ok := r.byService("Ingress", "console")
	require.True(t, ok, "console.ingress.enabled renders an Ingress")
	var in struct {
		Spec struct {
			TLS []struct {
				Hosts      []string `yaml:"hosts"`
				SecretName string   `yaml:"secretName"`
			} `yaml:"tls"`
			Rules []struct {
				Host string `yaml:"host"`
				HTTP struct {
					Paths []struct {
						Backend struct {
							Service struct {
								Name string `yaml:"name"`
								Port struct {
									Name string `yaml:"name"`
								} `yaml:"port"`
							} `yaml:"service"`
						} `yaml:"backend"`
					} `yaml:"paths"`
				} `yaml:"http"`
			} `yaml:"rules"`
		} `yaml:"spec"`
	}
	ing.decode(t, &in)
	cs, ok := r.byService("Service", "console")
	require.True(t, ok)
	require.Len(t, in.Spec.Rules, 1)
	require.Equal(t, "console.example.internal", in.Spec.Rules[0].Host)
	require.Len(t, in.Spec.Rules[0].HTTP.Paths, 1)
	require.Equal(t, cs.Metadata.Name, in.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name)
	require.Equal(t, "grpc", in.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Port.Name)
	require.Len(t, in.Spec.TLS, 1)
	require.Equal(t, []string{"console.example.internal"}, in.Spec.TLS[0].Hosts)
	require.Equal(t, "console-tls", in.Spec.TLS[0].SecretName)
	_, ok = render(t, "cm").byService("Ingress", "console")
	require.False(t, ok, "no Ingress by default")
	var trig workload
	o, _ := r.byService("Deployment", "trigger")
	o.decode(t, &trig)
	require.Equal(t, 5, *trig.Spec.Replicas)

	// Jaeger, and every service exporting to it.
	jd, ok := r.byService("Deployment", "jaeger")
	require.True(t, ok, "jaeger.enabled renders a Jaeger Deployment")
	js, ok := r.byService("Service", "jaeger")
	require.True(t, ok, "jaeger.enabled renders a Jaeger Service")
	require.Equal(t, jd.Metadata.Name, js.Metadata.Name)
	var jsvc service
	js.decode(t, &jsvc)
	require.True(t, slices.ContainsFunc(jsvc.Spec.Ports, func(p struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort any    `yaml:"targetPort"`
	}) bool {
		return p.Port == 4317
	}), "the Jaeger Service takes OTLP/gRPC on 4317")
	for _, svc := range services {
		e := env(t, r, svc)
		require.Equalf(t, js.Metadata.Name+":4317", value(e["CRONMESH_OTLP_ENDPOINT"]), "%s exports to the Jaeger", svc)
		require.Equal(t, "/etc/cronmesh/tls/tls.crt", value(e["CRONMESH_TLS_CERT"]))
		require.Equal(t, "/etc/cronmesh/tls/tls.key", value(e["CRONMESH_TLS_KEY"]))
		if svc != "console" {
			require.Equal(t, "/etc/cronmesh/tls/ca.crt", value(e["CRONMESH_TLS_CLIENT_CA"]))
			require.Equal(t, "postgres://cm_app@pg.db.svc:6432/cm?sslmode=verify-full&sslrootcert=/etc/cronmesh/postgres-ca/root.crt", value(e["CRONMESH_POSTGRES_URL"]))
			require.Equal(t, "amqps://cm_app:$(AMQP_PASSWORD)@mq.db.svc:5671/cronmesh?cacertfile=/etc/cronmesh/amqp-ca/ca.crt", value(e["CRONMESH_AMQP_URL"]))
		}
		switch svc {
		case "console":
			// Its own listener: browsers present no client certificate.
			_, ok := e["CRONMESH_TLS_CLIENT_CA"]
			require.False(t, ok, "the console asks browsers for no client certificate")
			require.Equal(t, "/etc/cronmesh/tls/tls.crt", value(e["CRONMESH_UPSTREAM_CLIENT_CERT"]))
			require.Equal(t, "/etc/cronmesh/tls/tls.key", value(e["CRONMESH_UPSTREAM_CLIENT_KEY"]))
		case "registry":
			// The history, for RerunExecution, over the chart's TLS.
			require.True(t, strings.HasPrefix(value(e["CRONMESH_HISTORY_URL"]), "https://"), "the registry reads the history over https")
			require.Equal(t, "/etc/cronmesh/tls/ca.crt", value(e["CRONMESH_HISTORY_CA_FILE"]))
			require.Equal(t, "/etc/cronmesh/tls/tls.crt", value(e["CRONMESH_HISTORY_CLIENT_CERT"]))
			require.Equal(t, "/etc/cronmesh/tls/tls.key", value(e["CRONMESH_HISTORY_CLIENT_KEY"]))
		default:
			// The managed keys come from the registry over the chart's TLS,
			// with the service's own certificate for the mutual part.
			require.Truef(t, strings.HasPrefix(value(e["CRONMESH_REGISTRY_URL"]), "https://"), "%s: the registry over https", svc)
			require.Equal(t, "/etc/cronmesh/tls/ca.crt", value(e["CRONMESH_REGISTRY_CA_FILE"]))
			require.Equal(t, "/etc/cronmesh/tls/tls.crt", value(e["CRONMESH_REGISTRY_CLIENT_CERT"]))
			require.Equal(t, "/etc/cronmesh/tls/tls.key", value(e["CRONMESH_REGISTRY_CLIENT_KEY"]))
		}
		var ports struct {
			Spec struct {
				Ports []struct {
					AppProtocol string `yaml:"appProtocol"`
				} `yaml:"ports"`
			} `yaml:"spec"`
		}
		s, _ := r.byService("Service", svc)
		s.decode(t, &ports)
		require.Equalf(t, "https", ports.Spec.Ports[0].AppProtocol, "%s: the Service says HTTPS", svc)
		c := mainContainer(t, r, svc)
		require.Equal(t, "registry.example.internal/cronmesh/"+svc+":1.2.3", c.Image)
	}
	require.Equal(t, "debug", value(env(t, r, "trigger")["CRONMESH_LOG_LEVEL"]))
	require.Equal(t, "warn", value(env(t, r, "registry")["CRONMESH_LOG_LEVEL"]))
	require.Equal(t, "512", value(env(t, r, "trigger")["CRONMESH_PARTITIONS"]))
	trigEnv := env(t, r, "trigger")
	require.Equal(t, "etcd-0.etcd:2379,etcd-1.etcd:2379,etcd-2.etcd:2379", value(trigEnv["CRONMESH_ETCD_ENDPOINTS"]))
	require.Equal(t, "/etc/cronmesh/etcd-tls/ca.crt", value(trigEnv["CRONMESH_ETCD_CA_FILE"]))
	require.Equal(t, "/etc/cronmesh/etcd-tls/tls.crt", value(trigEnv["CRONMESH_ETCD_CERT"]))
	require.Equal(t, "/etc/cronmesh/etcd-tls/tls.key", value(trigEnv["CRONMESH_ETCD_KEY"]))
	require.Equal(t, "cronmesh-trigger", value(trigEnv["CRONMESH_ETCD_USERNAME"]))
	require.Equal(t, "etcd-password", trigEnv["CRONMESH_ETCD_PASSWORD"].ValueFrom.SecretKeyRef.Key)
	require.Equal(t, "https://jaeger.example.internal/trace/{trace_id}", value(env(t, r, "history")["CRONMESH_TRACE_LINK_TEMPLATE"]))

	// The global rate limit, a service's config overriding it, the quotas.
	require.Equal(t, "20:40", value(env(t, r, "registry")["CRONMESH_RATE_LIMIT"]))
	require.Equal(t, "team-a=200:400,batch=off", value(env(t, r, "history")["CRONMESH_RATE_LIMIT_NAMESPACES"]))
	require.Equal(t, "500:1000", value(env(t, r, "dispatcher")["CRONMESH_RATE_LIMIT"]), "config wins over global.rateLimit")
	require.Equal(t, "team-a=50000,sandbox=100", value(env(t, r, "registry")["CRONMESH_MAX_JOBS_NAMESPACES"]))
	require.Equal(t, "10000", value(env(t, r, "registry")["CRONMESH_MAX_JOBS"]))
	for _, svc := range services {
		allow, ok := env(t, r, svc)["CRONMESH_TARGET_AMQP_ALLOW"]
		if svc == "registry" || svc == "dispatcher" {
			require.Truef(t, ok, "%s enforces the AMQP allow-list", svc)
			require.Equal(t, "team-a=shared.events,team-b=partners.*", value(allow))
			continue
		}
		require.Falsef(t, ok, "%s validates no targets", svc)
	}
}

// checkWorkloads: every container of every Deployment and StatefulSet has
// liveness and readiness probes, CPU and memory requests and limits, and runs
// as non-root on a read-only root filesystem without privilege escalation.
func checkWorkloads(t *testing.T, r rendered) {
	t.Helper()
	var n int
	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
		for _, o := range r.kind(kind) {
			n++
			var w workload
			o.decode(t, &w)
			pod := w.Spec.Template.Spec
			require.NotEmptyf(t, pod.Containers, "%s %s", kind, o.Metadata.Name)
			require.Equalf(t, w.Spec.Selector.MatchLabels, pick(w.Spec.Template.Metadata.Labels, w.Spec.Selector.MatchLabels),
				"%s %s: the pods carry the selector's labels", kind, o.Metadata.Name)
			for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
				where := fmt.Sprintf("%s %s, container %s", kind, o.Metadata.Name, c.Name)
				require.Truef(t, c.ReadinessProbe.handled(), "%s has no readinessProbe", where)
				require.Truef(t, c.LivenessProbe.handled(), "%s has no livenessProbe", where)
				for _, res := range []string{"cpu", "memory"} {
					require.NotEmptyf(t, c.Resources.Requests[res], "%s: no %s request", where, res)
					require.NotEmptyf(t, c.Resources.Limits[res], "%s: no %s limit", where, res)
				}
				sc := c.SecurityContext
				require.NotNilf(t, sc, "%s has no securityContext", where)
				nonRoot := sc.RunAsNonRoot
				if nonRoot == nil && pod.SecurityContext != nil {
					nonRoot = pod.SecurityContext.RunAsNonRoot
				}
				require.Truef(t, nonRoot != nil && *nonRoot, "%s: runAsNonRoot is not true", where)
				require.Truef(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem is not true", where)
				require.Truef(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation is not false", where)
				require.Falsef(t, sc.Privileged != nil && *sc.Privileged, "%s is privileged", where)
				for _, user := range []*securityContext{sc, pod.SecurityContext} {
					if user != nil && user.RunAsUser != nil {
						require.NotZerof(t, *user.RunAsUser, "%s runs as root", where)
					}
				}
			}
		}
	}
	require.NotZero(t, n, "no workloads rendered")
}

// checkServices: per cronmesh service, the container port is the port of
// --listen, the probes and the Service use it, every CRONMESH_* variable is
// a flag of that service with a value the flag accepts, credentials come
// from the Secret secretName, and a PodDisruptionBudget covers the pods.
func checkServices(t *testing.T, r rendered, secretName string) {
	t.Helper()
	for _, svc := range services {
		d, ok := r.byService("Deployment", svc)
		require.Truef(t, ok, "no Deployment for %s", svc)
		var w workload
		d.decode(t, &w)
		c := mainContainer(t, r, svc)
		require.Equal(t, []string{"serve"}, c.Args)

		// The port.
		_, defPort, err := net.SplitHostPort(defaultListen(t, svc))
		require.NoError(t, err)
		require.Lenf(t, c.Ports, 1, "%s serves on one port", svc)
		port := c.Ports[0].ContainerPort
		require.Equalf(t, defPort, strconv.Itoa(port), "%s's port is its --listen default", svc)
		e := env(t, r, svc)
		_, listenPort, err := net.SplitHostPort(value(e["CRONMESH_LISTEN"]))
		require.NoError(t, err)
		require.Equalf(t, strconv.Itoa(port), listenPort, "%s: CRONMESH_LISTEN and the container port", svc)
		_, tls := e["CRONMESH_TLS_CERT"]
		if tls {
			// The kubelet's grpc probe speaks no TLS: /readyz over HTTPS.
			require.NotNilf(t, c.ReadinessProbe.HTTPGet, "%s is ready by /readyz over HTTPS", svc)
			require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
			require.Equal(t, "HTTPS", c.ReadinessProbe.HTTPGet.Scheme)
			require.Contains(t, []any{port, c.Ports[0].Name}, c.ReadinessProbe.HTTPGet.Port)
		} else {
			require.NotNilf(t, c.ReadinessProbe.GRPC, "%s is ready by grpc.health.v1", svc)
			require.Equal(t, port, c.ReadinessProbe.GRPC.Port)
		}
		require.NotNilf(t, c.LivenessProbe.HTTPGet, "%s is alive by /healthz", svc)
		require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
		require.Equalf(t, map[bool]string{true: "HTTPS"}[tls], c.LivenessProbe.HTTPGet.Scheme, "%s: liveness over TLS exactly when serving TLS", svc)
		require.Contains(t, []any{port, c.Ports[0].Name}, c.LivenessProbe.HTTPGet.Port)
		checkFilesMounted(t, svc, w, c)

		s, ok := r.byService("Service", svc)
		require.Truef(t, ok, "no Service for %s", svc)
		var sv service
		s.decode(t, &sv)
		require.Equal(t, w.Spec.Selector.MatchLabels, sv.Spec.Selector)
		require.Len(t, sv.Spec.Ports, 1)
		require.Equal(t, port, sv.Spec.Ports[0].Port)
		require.Contains(t, []any{port, c.Ports[0].Name}, sv.Spec.Ports[0].TargetPort)

		// The environment against the flags.
		require.Emptyf(t, c.EnvFrom, "%s: envFrom hides which flags are set", svc)
		fs := flagSet(t, svc)
		seen := map[string]bool{}
		for _, v := range c.Env {
			require.Falsef(t, seen[v.Name], "%s: %s is set twice", svc, v.Name)
			seen[v.Name] = true
			if !strings.HasPrefix(v.Name, "CRONMESH_") {
				require.Containsf(t, helperEnv, v.Name, "%s: %s is neither a flag nor a known helper", svc, v.Name)
				continue
			}
			name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(v.Name, "CRONMESH_"), "_", "-"))
			f := fs.Lookup(name)
			require.NotNilf(t, f, "%s: %s is not a flag of %s (no --%s)", svc, v.Name, svc, name)
			if v.Value != nil {
				require.NoErrorf(t, fs.Set(name, *v.Value), "%s: %s=%q", svc, v.Name, *v.Value)
			}
		}
		require.Truef(t, seen["CRONMESH_LISTEN"], "%s: CRONMESH_LISTEN is not set", svc)
		require.Equalf(t, svc == "trigger", seen["CRONMESH_ETCD_ENDPOINTS"], "%s: only the trigger uses etcd", svc)

		// The PodDisruptionBudget.
		p, ok := r.byService("PodDisruptionBudget", svc)
		require.Truef(t, ok, "no PodDisruptionBudget for %s", svc)
		var b pdb
		p.decode(t, &b)
		require.Equal(t, w.Spec.Selector.MatchLabels, b.Spec.Selector.MatchLabels)
		require.True(t, b.Spec.MaxUnavailable != nil || b.Spec.MinAvailable != nil)

		if svc == "console" {
			checkConsole(t, r, e)
			continue
		}
		for _, name := range []string{"CRONMESH_POSTGRES_URL", "CRONMESH_AMQP_URL", "CRONMESH_API_KEYS", "PGPASSWORD"} {
			require.Truef(t, seen[name], "%s: %s is not set", svc, name)
		}

		// Credentials only from the Secret.
		credentials := []string{"CRONMESH_API_KEYS", "PGPASSWORD", "AMQP_PASSWORD"}
		if _, ok := e["CRONMESH_ETCD_PASSWORD"]; ok {
			credentials = append(credentials, "CRONMESH_ETCD_PASSWORD")
		}
		for _, name := range credentials {
			ref := e[name].ValueFrom
			require.Truef(t, ref != nil && ref.SecretKeyRef != nil, "%s: %s is not from a Secret", svc, name)
			require.Equal(t, secretName, ref.SecretKeyRef.Name)
		}
		// The managed API keys: every other service polls the chart's
		// registry, authenticated with a configured key from the Secret.
		if svc == "registry" {
			_, ok := e["CRONMESH_REGISTRY_URL"]
			require.False(t, ok, "the registry reads the keys from its own database")
			// RerunExecution reads executions from the chart's history.
			hist, ok := r.byService("Service", "history")
			require.True(t, ok)
			histURL, err := url.Parse(value(e["CRONMESH_HISTORY_URL"]))
			require.NoError(t, err)
			require.Equal(t, hist.Metadata.Name+":8084", histURL.Host, "the registry reads executions from the chart's history")
		} else {
			_, ok := e["CRONMESH_HISTORY_URL"]
			require.Falsef(t, ok, "%s: only the registry reads the history", svc)
			reg, ok := r.byService("Service", "registry")
			require.True(t, ok)
			regURL, err := url.Parse(value(e["CRONMESH_REGISTRY_URL"]))
			require.NoError(t, err)
			require.Equalf(t, reg.Metadata.Name+":8081", regURL.Host, "%s fetches the managed keys from the chart's registry", svc)
			ref := e["CRONMESH_REGISTRY_API_KEY"].ValueFrom
			require.Truef(t, ref != nil && ref.SecretKeyRef != nil && ref.SecretKeyRef.Optional, "%s: CRONMESH_REGISTRY_API_KEY is an optional key of the Secret", svc)
			require.Equal(t, secretName, ref.SecretKeyRef.Name)
		}
		require.NotEmptyf(t, value(e["CRONMESH_KEY_REFRESH"]), "%s: the key refresh interval", svc)

		pgURL, err := url.Parse(value(e["CRONMESH_POSTGRES_URL"]))
		require.NoError(t, err)
		_, hasPassword := pgURL.User.Password()
		require.Falsef(t, hasPassword, "%s: a password in CRONMESH_POSTGRES_URL (it is PGPASSWORD, from the Secret)", svc)
	}

	// The trigger's ring identity is the pod's.
	e := env(t, r, "trigger")
	require.Equal(t, "metadata.name", e["CRONMESH_NODE_ID"].ValueFrom.FieldRef.FieldPath)
	require.Equal(t, "status.podIP", e["POD_IP"].ValueFrom.FieldRef.FieldPath)
	require.Equal(t, "$(POD_IP):8082", value(e["CRONMESH_ADVERTISE"]))
}

// checkConsole: the console forwards to the chart's Service of each API
// service on its port, over https exactly when the chart serves TLS
// (trusting the Secret's CA, showing the chart's certificate under mutual
// TLS), and reads nothing from the Secret: it holds no key and reaches no
// database, broker or etcd.
func checkConsole(t *testing.T, r rendered, e map[string]envVar) {
	t.Helper()
	_, tls := e["CRONMESH_TLS_CERT"]
	for _, svc := range apiServices {
		s, ok := r.byService("Service", svc)
		require.True(t, ok)
		var sv service
		s.decode(t, &sv)
		u, err := url.Parse(value(e["CRONMESH_"+strings.ToUpper(svc)+"_URL"]))
		require.NoError(t, err)
		require.Equalf(t, fmt.Sprintf("%s:%d", s.Metadata.Name, sv.Spec.Ports[0].Port), u.Host, "the console forwards to the chart's %s", svc)
		require.Equalf(t, map[bool]string{true: "https", false: "http"}[tls], u.Scheme, "the console reaches %s over TLS exactly when the chart serves TLS", svc)
	}
	if tls {
		require.Equal(t, "/etc/cronmesh/tls/ca.crt", value(e["CRONMESH_UPSTREAM_CA_FILE"]))
	}
	for name, v := range e {
		require.Falsef(t, v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil, "the console reads %s from a Secret", name)
		require.NotContainsf(t, []string{"CRONMESH_POSTGRES_URL", "CRONMESH_AMQP_URL", "CRONMESH_API_KEYS", "PGPASSWORD", "AMQP_PASSWORD", "CRONMESH_ETCD_ENDPOINTS"}, name,
			"the console reaches no database, broker or etcd and holds no key")
	}
}

// checkFilesMounted: every file the environment names (a flag's value that
// is an absolute path, the CA files in the PostgreSQL and AMQP URLs) lies in
// a read-only mount of a Secret.
func checkFilesMounted(t *testing.T, svc string, w workload, c container) {
	t.Helper()
	secretVolumes := map[string]bool{}
	for _, v := range w.Spec.Template.Spec.Volumes {
		secretVolumes[v.Name] = v.Secret != nil && v.Secret.SecretName != ""
	}
	var files []string
	for _, v := range c.Env {
		val := value(v)
		switch {
		case strings.HasPrefix(val, "/"):
			files = append(files, val)
		case v.Name == "CRONMESH_POSTGRES_URL" || v.Name == "CRONMESH_AMQP_URL":
			u, err := url.Parse(val)
			require.NoError(t, err)
			for _, param := range []string{"sslrootcert", "cacertfile"} {
				if f := u.Query().Get(param); f != "" {
					files = append(files, f)
				}
			}
		}
	}
	for _, f := range files {
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		}) bool {
			return strings.HasPrefix(f, m.MountPath+"/") && m.ReadOnly && secretVolumes[m.Name]
		})
		require.Truef(t, mounted, "%s: %s is in no read-only mount of a Secret", svc, f)
	}
}

func (p *probe) handled() bool {
	return p != nil && (p.GRPC != nil || p.HTTPGet != nil || p.TCPSocket != nil || p.Exec != nil)
}

func mainContainer(t *testing.T, r rendered, svc string) container {
	t.Helper()
	d, ok := r.byService("Deployment", svc)
	require.Truef(t, ok, "no Deployment for %s", svc)
	var w workload
	d.decode(t, &w)
	for _, c := range w.Spec.Template.Spec.Containers {
		if c.Name == svc {
			return c
		}
	}
	t.Fatalf("the %s Deployment has no container %s", svc, svc)
	return container{}
}

func env(t *testing.T, r rendered, svc string) map[string]envVar {
	t.Helper()
	m := map[string]envVar{}
	for _, v := range mainContainer(t, r, svc).Env {
		m[v.Name] = v
	}
	return m
}

func value(v envVar) string {
	if v.Value == nil {
		return ""
	}
	return *v.Value
}

// pick returns the entries of m whose keys are in keys.
func pick(m, keys map[string]string) map[string]string {
	out := map[string]string{}
	for k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}
