package publisher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2/google"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
)

// helmBinary is the Helm make test builds (testenv.Helm).
func helmBinary(tb testing.TB) string { return testenv.Helm(tb) }

// testImage sets a repository other than the chart's placeholder, which
// the chart refuses.
const testImage = "image.repository=europe-west1-docker.pkg.dev/my-project/fleetcast/fleetcast-publisher"

// manifests are rendered objects by kind/namespace/name.
type manifests map[string]*unstructured.Unstructured

func parseManifests(tb testing.TB, text []byte) manifests {
	tb.Helper()
	out := manifests{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(text), 4096)
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(tb, err)
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		require.NotContains(tb, out, key, "rendered twice")
		out[key] = u
	}
}

// installed are the objects helm install creates: all but the hooks
// (helm test's pod and Service).
func (m manifests) installed() manifests {
	out := manifests{}
	for k, obj := range m {
		if obj.GetAnnotations()["helm.sh/hook"] == "" {
			out[k] = obj
		}
	}
	return out
}

func (m manifests) keys() []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// renderChart runs helm template on publisher/chart in namespace ns with
// the values files and --set values; it returns the objects, or Helm's
// error.
func renderChart(tb testing.TB, ns string, files []string, set ...string) (manifests, []byte, error) {
	tb.Helper()
	args := []string{"template", "fleetcast", "chart", "--namespace", ns}
	for _, f := range files {
		args = append(args, "--values", f)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(tb.Context(), helmBinary(tb), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, errors.New(strings.TrimSpace(stderr.String()))
	}
	return parseManifests(tb, out), out, nil
}

func mustRenderChart(tb testing.TB, ns string, files []string, set ...string) (manifests, []byte) {
	tb.Helper()
	m, text, err := renderChart(tb, ns, files, set...)
	require.NoError(tb, err)
	return m, text
}

// container is the publisher's container of the rendered Deployment.
func container(tb testing.TB, m manifests) map[string]any {
	tb.Helper()
	for _, obj := range m {
		if obj.GetKind() != "Deployment" {
			continue
		}
		cs, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		require.NoError(tb, err)
		require.Len(tb, cs, 1)
		return cs[0].(map[string]any)
	}
	tb.Fatal("no Deployment rendered")
	return nil
}

// configOf is the publisher configuration the rendered Deployment gives
// the pod podName: its args, and its environment from the ConfigMap it
// reads and its own variables, parsed as the publisher parses them.
func configOf(tb testing.TB, m manifests, podName string) publisher.Config {
	tb.Helper()
	c := container(tb, m)
	env := map[string]string{}
	for _, from := range c["envFrom"].([]any) {
		name := from.(map[string]any)["configMapRef"].(map[string]any)["name"].(string)
		var cm *unstructured.Unstructured
		for _, obj := range m {
			if obj.GetKind() == "ConfigMap" && obj.GetName() == name {
				cm = obj
			}
		}
		require.NotNil(tb, cm, "the ConfigMap %s the Deployment reads", name)
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		for k, v := range data {
			env[k] = v
		}
	}
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		name := e["name"].(string)
		switch {
		case e["value"] != nil:
			env[name] = e["value"].(string)
		case name == "POD_NAME":
			env[name] = podName
		}
	}
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	return printedConfig(tb, args, env)
}

// publisherBinary is cmd/fleetcast-publisher, built once.
var publisherBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "fleetcast-publisher-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "fleetcast-publisher")
	return bin, proc.Build(context.Background(), "", "github.com/fleetcast/fleetcast/cmd/fleetcast-publisher", bin)
})

// printedConfig is the configuration the publisher's program makes of
// args and env alone, as it would start with them (--print-config).
func printedConfig(tb testing.TB, args []string, env map[string]string) publisher.Config {
	tb.Helper()
	bin, err := publisherBinary()
	require.NoError(tb, err)
	cmd := exec.Command(bin, append(args, "--print-config")...)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(tb, cmd.Run(), "the rendered configuration must start the publisher: %s", stderr.String())
	var cfg publisher.Config
	require.NoError(tb, json.Unmarshal(stdout.Bytes(), &cfg))
	return cfg
}

// appVersion is the chart's appVersion.
func appVersion(tb testing.TB) string {
	tb.Helper()
	var chart struct{ Version, AppVersion string }
	b, err := os.ReadFile("chart/Chart.yaml")
	require.NoError(tb, err)
	require.NoError(tb, yaml.Unmarshal(b, &chart))
	require.Equal(tb, chart.Version, chart.AppVersion, "the chart and the publisher are released together")
	return chart.AppVersion
}

func TestChartLints(t *testing.T) {
	for _, values := range []string{"testdata/chart-values-gke.yaml", "testdata/chart-values-wif.yaml"} {
		out, err := exec.CommandContext(t.Context(), helmBinary(t), "lint", "--strict", "chart", "--values", values).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "0 chart(s) failed")
	}
}

// TestChartRefusesBadValues: a mistake fails the install, naming the
// value, before anything reaches the cluster.
func TestChartRefusesBadValues(t *testing.T) {
	gke := []string{"testdata/chart-values-gke.yaml"}
	for _, tc := range []struct {
		files []string
		set   []string
		want  string
	}{
		{nil, nil, `cluster "": required`},
		{gke, []string{"cluster=PC_EU"}, `cluster "PC_EU"`},
		{gke, []string{"project="}, "project: required"},
		{gke, []string{"clustr=pc"}, "additional properties 'clustr' not allowed"},
		{gke, []string{"identity.serviceAccount=publisher"}, "identity.serviceAccount"},
		{gke, []string{"identity.type=wif"}, "/identity/type"},
		{gke, []string{"identity.type=workloadIdentityFederation"}, "identity.workloadIdentityFederation.provider"},
		{gke, []string{"image.digest=sha256:abc"}, "/image/digest"},
		{gke, []string{"intervals.min=1x"}, "/intervals/min"},
		{gke, []string{"intervals.shutdownGrace=1m"}, "/intervals/shutdownGrace"},
		{gke, []string{"leaderElection.enabled=false"}, "every replica would publish"},
		{gke, []string{"logLevel=LOUD"}, "/logLevel"},
		{gke, []string{"traceSampleRatio=2"}, "/traceSampleRatio"},
		{gke, []string{"traceSampleRatio=1.5"}, "/traceSampleRatio"},
		{gke, []string{"traceSampleRatio=all"}, "/traceSampleRatio"},
		{gke, []string{"identity.namespace=games"}, `identity.namespace "games": the Workload Identity binding is for that namespace's service account, but the release is in "fleetcast"`},
		{gke, []string{"serviceAccount.name=Bad_Name"}, `serviceAccount.name "Bad_Name"`},
		{gke, []string{"serviceAccount.nmae=x"}, "additional properties 'nmae' not allowed"},
		{gke, []string{"allocatorEndpoint=https://34.1.2.3"}, "/allocatorEndpoint"},
	} {
		t.Run(strings.Join(tc.set, ","), func(t *testing.T) {
			_, _, err := renderChart(t, "fleetcast", tc.files, tc.set...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, _, err := renderChart(t, "fleetcast", gke, "leaderElection.enabled=false", "replicas=1")
	assert.NoError(t, err, "one replica without election is a valid setup")
	// Every level the publisher reads (logging.ParseLevel), in any case.
	for _, level := range []string{"debug", "DEBUG", "Info", "warn", "WARNING", "error"} {
		_, _, err := renderChart(t, "fleetcast", gke, "logLevel="+level)
		assert.NoError(t, err, "logLevel=%s", level)
		_, err = logging.ParseLevel(level)
		assert.NoError(t, err, "the publisher reads logLevel=%s", level)
	}
}

func TestChartTemplatesGKE(t *testing.T) {
	m, _ := mustRenderChart(t, "fleetcast", []string{"testdata/chart-values-gke.yaml"})
	assert.Equal(t, []string{
		"ClusterRole//fleetcast-publisher", "ClusterRoleBinding//fleetcast-publisher", "ConfigMap/fleetcast/fleetcast-publisher",
		"Deployment/fleetcast/fleetcast-publisher", "Pod/fleetcast/fleetcast-publisher-check", "PodDisruptionBudget/fleetcast/fleetcast-publisher",
		"Role/fleetcast/fleetcast-publisher", "RoleBinding/fleetcast/fleetcast-publisher",
		"Service/fleetcast/fleetcast-publisher-check", "ServiceAccount/fleetcast/fleetcast-publisher",
	}, m.keys())
	sa := m["ServiceAccount/fleetcast/fleetcast-publisher"]
	assert.Equal(t, "fleetcast-publisher@my-project.iam.gserviceaccount.com", sa.GetAnnotations()["iam.gke.io/gcp-service-account"])
	c := container(t, m)
	assert.Equal(t, "europe-west1-docker.pkg.dev/my-project/fleetcast/fleetcast-publisher:"+appVersion(t), c["image"], "the default tag follows the chart")
	assert.NotContains(t, c, "volumeMounts")

	cfg := configOf(t, m, "fleetcast-publisher-abc")
	assert.Equal(t, "pc-europe-west1", cfg.Cluster)
	assert.Equal(t, map[string]string{"platform": "pc", "region": "europe-west1"}, cfg.ClusterLabels)
	assert.Equal(t, "my-project", cfg.Project)
	assert.Equal(t, "fleet-events-pc-europe-west1", cfg.Topic)
	assert.Equal(t, "fleetcast", cfg.LeaseNamespace, "the Lease lives in the release's namespace")
	assert.Equal(t, "fleetcast-publisher-abc", cfg.ID)
	assert.True(t, cfg.LeaderElect)
	assert.Nil(t, cfg.Namespaces, "every namespace")
	assert.Zero(t, cfg.TraceSampleRatio, "no trace exported unless asked")

	// The topic defaults to Terraform's name for the cluster; settings map
	// to the publisher's flags.
	m, _ = mustRenderChart(t, "games-ops", nil, testImage, "cluster=ps5-asia", "project=p", "identity.type=none", "replicas=3",
		"labelSelector=tier!=test", "intervals.snapshot=15s", "labelsExclude={noise/*,tmp}", "image.tag=0.2.9", "podDisruptionBudget.enabled=false",
		"traceSampleRatio=0.05", "allocatorEndpoint=34.1.2.3:443")
	cfg = configOf(t, m, "x")
	assert.Equal(t, "34.1.2.3:443", cfg.AllocatorEndpoint, "the cluster's allocator, advertised")
	assert.Equal(t, 0.05, cfg.TraceSampleRatio, "--set passes it as a string")
	assert.Equal(t, "fleet-events-ps5-asia", cfg.Topic)
	assert.Equal(t, "tier!=test", cfg.LabelSelector)
	assert.Equal(t, []string{"noise/*", "tmp"}, cfg.Projection.ExcludeLabels)
	assert.Equal(t, "15s", cfg.SnapshotInterval.String())
	assert.Equal(t, "games-ops", cfg.LeaseNamespace)
	assert.Equal(t, "europe-west1-docker.pkg.dev/my-project/fleetcast/fleetcast-publisher:0.2.9", container(t, m)["image"])
	assert.NotContains(t, m, "PodDisruptionBudget/games-ops/fleetcast-publisher")
	assert.Empty(t, m["ServiceAccount/games-ops/fleetcast-publisher"].GetAnnotations())
	replicas, _, _ := unstructured.NestedFieldNoCopy(m["Deployment/games-ops/fleetcast-publisher"].Object, "spec", "replicas")
	assert.EqualValues(t, 3, replicas)

	// The Kubernetes service account Terraform's binding names, in the
	// namespace it names: the pods run as it, and the bindings bind it.
	m, _ = mustRenderChart(t, "games-ops", []string{"testdata/chart-values-gke.yaml"},
		"serviceAccount.name=fleetcast-publisher-ps5-eu", "identity.namespace=games-ops")
	require.Contains(t, m, "ServiceAccount/games-ops/fleetcast-publisher-ps5-eu")
	assert.NotContains(t, m, "ServiceAccount/games-ops/fleetcast-publisher")
	account, _, _ := unstructured.NestedString(m["Deployment/games-ops/fleetcast-publisher"].Object, "spec", "template", "spec", "serviceAccountName")
	assert.Equal(t, "fleetcast-publisher-ps5-eu", account)
	for _, key := range []string{"ClusterRoleBinding//fleetcast-publisher", "RoleBinding/games-ops/fleetcast-publisher"} {
		subjects, _, _ := unstructured.NestedSlice(m[key].Object, "subjects")
		require.Len(t, subjects, 1, key)
		assert.Equal(t, "fleetcast-publisher-ps5-eu", subjects[0].(map[string]any)["name"], key)
	}
}

// TestChartTemplatesWorkloadIdentityFederation: a cluster outside GKE
// gets a projected token whose audience its provider accepts and a
// credential configuration Google's auth library reads as an
// external_account impersonating the service account; watching two
// namespaces, it gets Roles there and no ClusterRole.
func TestChartTemplatesWorkloadIdentityFederation(t *testing.T) {
	m, _ := mustRenderChart(t, "fleetcast", []string{"testdata/chart-values-wif.yaml"})
	assert.Equal(t, []string{
		"ConfigMap/fleetcast/fleetcast-publisher", "ConfigMap/fleetcast/fleetcast-publisher-google-credentials",
		"Deployment/fleetcast/fleetcast-publisher", "Pod/fleetcast/fleetcast-publisher-check", "PodDisruptionBudget/fleetcast/fleetcast-publisher",
		"PodMonitoring/fleetcast/fleetcast-publisher",
		"Role/beta/fleetcast-publisher-read", "Role/fleetcast/fleetcast-publisher", "Role/games/fleetcast-publisher-read",
		"RoleBinding/beta/fleetcast-publisher-read", "RoleBinding/fleetcast/fleetcast-publisher", "RoleBinding/games/fleetcast-publisher-read",
		"Service/fleetcast/fleetcast-publisher-check", "Service/fleetcast/fleetcast-publisher-metrics", "ServiceAccount/fleetcast/fleetcast-publisher",
		"ServiceMonitor/fleetcast/fleetcast-publisher",
	}, m.keys())
	assert.Empty(t, m["ServiceAccount/fleetcast/fleetcast-publisher"].GetAnnotations(), "no GKE annotation")
	c := container(t, m)
	assert.Equal(t, "us-east1-docker.pkg.dev/my-project/fleetcast/fleetcast-publisher@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", c["image"])
	cfg := configOf(t, m, "p")
	assert.Equal(t, []string{"games", "beta"}, cfg.Namespaces)

	// The credentials: the projected token and the configuration, where
	// the variable and the configuration say they are.
	var credsPath string
	for _, e := range c["env"].([]any) {
		if e.(map[string]any)["name"] == "GOOGLE_APPLICATION_CREDENTIALS" {
			credsPath = e.(map[string]any)["value"].(string)
		}
	}
	mount := c["volumeMounts"].([]any)[0].(map[string]any)
	assert.Equal(t, filepath.Join(mount["mountPath"].(string), "credential-configuration.json"), credsPath)
	volumes, _, _ := unstructured.NestedSlice(m["Deployment/fleetcast/fleetcast-publisher"].Object, "spec", "template", "spec", "volumes")
	sources := volumes[0].(map[string]any)["projected"].(map[string]any)["sources"].([]any)
	token := sources[0].(map[string]any)["serviceAccountToken"].(map[string]any)
	provider := "//iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/fleetcast-eks-us-east-1/providers/kubernetes"
	assert.Equal(t, "https:"+provider, token["audience"], "a provider's default allowed audience")
	assert.Equal(t, "fleetcast-publisher-google-credentials", sources[1].(map[string]any)["configMap"].(map[string]any)["name"])

	data, _, _ := unstructured.NestedStringMap(m["ConfigMap/fleetcast/fleetcast-publisher-google-credentials"].Object, "data")
	config := []byte(data["credential-configuration.json"])
	creds, err := google.CredentialsFromJSONWithType(context.Background(), config, google.ExternalAccount, "https://www.googleapis.com/auth/pubsub")
	require.NoError(t, err, "Google's auth library reads the configuration: %s", config)
	require.NotNil(t, creds.TokenSource)
	var parsed struct {
		Audience                       string `json:"audience"`
		ServiceAccountImpersonationURL string `json:"service_account_impersonation_url"`
		CredentialSource               struct {
			File string `json:"file"`
		} `json:"credential_source"`
	}
	require.NoError(t, yaml.Unmarshal(config, &parsed))
	assert.Equal(t, provider, parsed.Audience)
	assert.Equal(t, filepath.Join(mount["mountPath"].(string), token["path"].(string)), parsed.CredentialSource.File)
	assert.Contains(t, parsed.ServiceAccountImpersonationURL, "/serviceAccounts/fleetcast-pub-eks-us-east-1@my-project.iam.gserviceaccount.com:generateAccessToken")

	checkScraping(t, m)
}

// checkScraping: the ServiceMonitor's Service and the PodMonitoring of
// the values in testdata/chart-values-wif.yaml select the publisher's pods,
// on its metrics port.
func checkScraping(t *testing.T, m manifests) {
	podLabels, _, _ := unstructured.NestedStringMap(m["Deployment/fleetcast/fleetcast-publisher"].Object, "spec", "template", "metadata", "labels")
	svcSelector, _, _ := unstructured.NestedStringMap(m["Service/fleetcast/fleetcast-publisher-metrics"].Object, "spec", "selector")
	assert.Equal(t, podLabels, svcSelector)
	smSelector, _, _ := unstructured.NestedStringMap(m["ServiceMonitor/fleetcast/fleetcast-publisher"].Object, "spec", "selector", "matchLabels")
	svcLabels := m["Service/fleetcast/fleetcast-publisher-metrics"].GetLabels()
	for k, v := range smSelector {
		assert.Equal(t, v, svcLabels[k], "the ServiceMonitor selects the Service by %s", k)
	}
	assert.Equal(t, "prometheus", m["ServiceMonitor/fleetcast/fleetcast-publisher"].GetLabels()["release"])
	pmSelector, _, _ := unstructured.NestedStringMap(m["PodMonitoring/fleetcast/fleetcast-publisher"].Object, "spec", "selector", "matchLabels")
	assert.Equal(t, podLabels, pmSelector)
	endpoints, _, _ := unstructured.NestedSlice(m["PodMonitoring/fleetcast/fleetcast-publisher"].Object, "spec", "endpoints")
	assert.Equal(t, map[string]any{"port": "metrics", "path": "/metrics", "interval": "15s"}, endpoints[0])
}

// helmOnly are the labels and annotations the chart adds to what
// publisher/deploy renders: Helm's release bookkeeping, and the config
// checksum that rolls the pods when the settings change.
var helmOnly = []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart", "checksum/config"}

func withoutHelmOnly(obj *unstructured.Unstructured) map[string]any {
	o := obj.DeepCopy().Object
	var strip func(v any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if k == "labels" || k == "annotations" {
					if m, ok := c.(map[string]any); ok {
						for _, h := range helmOnly {
							delete(m, h)
						}
						if len(m) == 0 {
							delete(v, k)
						}
						continue
					}
				}
				strip(c)
			}
		case []any:
			for _, c := range v {
				strip(c)
			}
		}
	}
	strip(o)
	return o
}

// TestChartAndKustomizeAgree renders the chart with the values of
// publisher/deploy/params.env and the kustomization: the same objects, the
// same RBAC, the same pods (Helm's bookkeeping aside), and the same
// publisher configuration, so that the two never disagree.
func TestChartAndKustomizeAgree(t *testing.T) {
	chart, _ := mustRenderChart(t, "fleetcast", []string{"testdata/chart-values-gke.yaml"})
	// The user's overlay of the base: the image in their registry.
	overlay := t.TempDir()
	abs, err := filepath.Abs("deploy")
	require.NoError(t, err)
	base, err := filepath.Rel(overlay, abs) // kustomize takes no absolute base
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte("resources: ["+base+"]\n"+
		"images:\n  - name: REGION-docker.pkg.dev/PROJECT/fleetcast/fleetcast-publisher\n    newName: europe-west1-docker.pkg.dev/my-project/fleetcast/fleetcast-publisher\n"), 0o644))
	out, err := exec.CommandContext(t.Context(), "kubectl", "kustomize", overlay).CombinedOutput()
	require.NoError(t, err, "%s", out)
	kust := parseManifests(t, out)
	delete(kust, "Namespace//fleetcast") // helm install --create-namespace
	require.Equal(t, kust.keys(), chart.installed().keys())
	for _, key := range kust.keys() {
		if kust[key].GetKind() == "ConfigMap" {
			continue // compared as the configuration it gives, below
		}
		assert.Equal(t, withoutHelmOnly(kust[key]), withoutHelmOnly(chart[key]), key)
	}
	assert.Equal(t, configOf(t, kust, "pod"), configOf(t, chart, "pod"))
}

// TestChartInstallsAndRuns applies the rendered chart to the real API
// server (a server-side dry run first, as a user would check), then runs
// the publisher with the configuration its Deployment gives and a token of
// its ServiceAccount: watching one namespace, through Roles there only, it
// publishes a fleet with its rollout and autoscaler.
func TestChartInstallsAndRuns(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	e := newNamespace(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	release := e.Name + "-fleetcast"
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release}}, metav1.CreateOptions{})
	require.NoError(t, err)

	rendered, _ := mustRenderChart(t, release, []string{"testdata/chart-values-gke.yaml"}, "cluster=helm-run", "namespaces={"+e.Name+"}")
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	require.NoError(t, os.WriteFile(file, rendered.installed().yaml(t), 0o600))
	out, err := c.Kubectl(ctx, "apply", "--server-side", "--dry-run=server", "-f", file)
	require.NoError(t, err)
	for _, key := range rendered.installed().keys() {
		obj := rendered[key]
		kind := strings.ToLower(obj.GetKind())
		if group := obj.GroupVersionKind().Group; group != "" {
			kind += "." + group
		}
		assert.Contains(t, out, kind+"/"+obj.GetName()+" serverside-applied (server dry run)")
	}
	_, err = c.Kubectl(ctx, "apply", "--server-side", "-f", file)
	require.NoError(t, err)

	tok, err := kube.CoreV1().ServiceAccounts(release).CreateToken(ctx, "fleetcast-publisher",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	sa := c.RESTConfigWithToken(tok.Status.Token)

	cfg := configOf(t, rendered, "fleetcast-publisher-0")
	port, err := proc.FreePort()
	require.NoError(t, err)
	cfg.MetricsAddr = "127.0.0.1:" + port // the test's port is not the pod's
	rec := newRecorder()
	kubetest.StartPublisher(t, cfg, sa, rec)
	e.CreateFleet(e.Name, "charted", nil)
	e.CreateGameServerSet(e.Name, "charted", "charted-a", e.FleetTemplate(e.Name, "charted"), 3)
	e.SetGameServerSetStatus(e.Name, "charted-a", map[string]any{"replicas": int64(3), "readyReplicas": int64(3)})
	e.CreateFleetAutoscaler(e.Name, "charted", "charted", map[string]any{"type": "Buffer", "buffer": map[string]any{"bufferSize": int64(1), "maxReplicas": int64(5)}}, 30)
	s := rec.waitForState(t, "the fleet with its rollout and autoscaler", "charted", func(s fleet.State) bool {
		return s.Rollout.Complete && len(s.Autoscalers) == 1
	})
	assert.Equal(t, "Buffer", s.Autoscalers[0].Policy.Type)

	helmTestPasses(t, rendered, release, port)

	_, err = dynamic.NewForConfigOrDie(sa).Resource(publisher.FleetGVR).Namespace("default").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "fleets outside the watched namespaces: %v", err)
}

// checkArgs are the arguments of the helm test's pod (fleetcast-publisher
// check), without its --endpoint, which names the cluster's Service.
func checkArgs(tb testing.TB, m manifests, ns string) []string {
	tb.Helper()
	pod := m["Pod/"+ns+"/fleetcast-publisher-check"]
	require.NotNil(tb, pod, "the helm test's pod")
	assert.Equal(tb, "test", pod.GetAnnotations()["helm.sh/hook"])
	cs, _, err := unstructured.NestedSlice(pod.Object, "spec", "containers")
	require.NoError(tb, err)
	require.Len(tb, cs, 1)
	var args []string
	for _, a := range cs[0].(map[string]any)["args"].([]any) {
		if s := a.(string); !strings.HasPrefix(s, "--endpoint=") {
			args = append(args, s)
		} else {
			assert.Equal(tb, "--endpoint=fleetcast-publisher-check."+ns+".svc:8080", s, "the headless Service, at the metrics port")
		}
	}
	require.Equal(tb, "check", args[0])
	return args
}

// runChecked runs the publisher's binary with args; it returns its
// output, standard error included.
func runChecked(ctx context.Context, bin string, args []string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// yaml is the objects as one multi-document YAML, in keys' order.
func (m manifests) yaml(tb testing.TB) []byte {
	tb.Helper()
	var out []byte
	for _, k := range m.keys() {
		b, err := yaml.Marshal(m[k].Object)
		require.NoError(tb, err)
		out = append(append(out, "---\n"...), b...)
	}
	return out
}

// helmTestPasses runs what helm test's pod runs (templates/tests/check.yaml)
// against the publisher serving its metrics on port: its one replica
// leads, is ready, snapshots and publishes. Where no replica answers, the
// check says so and fails.
func helmTestPasses(t *testing.T, rendered manifests, release, port string) {
	args := checkArgs(t, rendered, release)
	bin, err := publisherBinary()
	require.NoError(t, err)
	out, err := runChecked(t.Context(), bin, append(args, "--endpoint=127.0.0.1:"+port, "--wait=60s"))
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `(?m)^127\.0\.0\.1:\d+: leader, term \d+, ready, last snapshot \S+, [1-9]\d* published, 0 failed$`, out)
	assert.Contains(t, out, "check: publishing (1 replicas)")
	closed, err := proc.FreePort()
	require.NoError(t, err)
	out, err = runChecked(t.Context(), bin, append(args, "--endpoint=127.0.0.1:"+closed, "--wait=1s"))
	require.Error(t, err)
	assert.Contains(t, out, "check: the cluster is not being published")
	assert.Contains(t, out, "does not answer")
}
