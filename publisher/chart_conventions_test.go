package publisher_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// podSpec is the rendered Deployment's pod template spec.
func podSpec(t *testing.T, m manifests, key string) map[string]any {
	t.Helper()
	require.Contains(t, m, key)
	spec, _, err := unstructured.NestedMap(m[key].Object, "spec", "template", "spec")
	require.NoError(t, err)
	return spec
}

// TestChartRefusesThePlaceholderImage: the default repository is a
// placeholder, and the install says what to set instead.
func TestChartRefusesThePlaceholderImage(t *testing.T) {
	_, _, err := renderChart(t, "fleetcast", nil, "cluster=pc", "project=p", "identity.type=none")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `image.repository "REGION-docker.pkg.dev/PROJECT/fleetcast/fleetcast-publisher" is the chart's placeholder`)
	assert.Contains(t, err.Error(), "publisher_image", "names Terraform's output")
	_, _, err = renderChart(t, "fleetcast", nil, "cluster=pc", "project=p", "identity.type=none", "image.repository=europe-docker.pkg.dev/PROJECT/x/fleetcast-publisher")
	assert.ErrorContains(t, err, "placeholder", "half-edited")
}

// TestChartNames: nameOverride and fullnameOverride as Helm charts have
// them; the default names stay what kustomize and Terraform name.
func TestChartNames(t *testing.T) {
	gke := []string{"testdata/chart-values-gke.yaml"}
	m, _ := mustRenderChart(t, "fleetcast", gke, "fullnameOverride=fc-beta", "serviceAccount.name=")
	for _, key := range []string{"Deployment/fleetcast/fc-beta", "ConfigMap/fleetcast/fc-beta", "ClusterRole//fc-beta", "ClusterRoleBinding//fc-beta",
		"Role/fleetcast/fc-beta", "RoleBinding/fleetcast/fc-beta", "PodDisruptionBudget/fleetcast/fc-beta", "ServiceAccount/fleetcast/fc-beta",
		"Pod/fleetcast/fc-beta-check", "Service/fleetcast/fc-beta-check"} {
		assert.Contains(t, m, key)
	}
	assert.Len(t, m, 10, "every object renamed: %v", m.keys())
	spec := podSpec(t, m, "Deployment/fleetcast/fc-beta")
	assert.Equal(t, "fc-beta", spec["serviceAccountName"], "an empty serviceAccount.name follows the objects' name")
	from := spec["containers"].([]any)[0].(map[string]any)["envFrom"].([]any)[0].(map[string]any)
	assert.Equal(t, "fc-beta", from["configMapRef"].(map[string]any)["name"])

	m, _ = mustRenderChart(t, "fleetcast", gke, "nameOverride=publisher")
	d := m["Deployment/fleetcast/publisher"]
	require.NotNil(t, d, "%v", m.keys())
	assert.Equal(t, "publisher", d.GetLabels()["app.kubernetes.io/name"])
	sel, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
	assert.Equal(t, "publisher", sel["app.kubernetes.io/name"])

	_, _, err := renderChart(t, "fleetcast", gke, "fullnameOverride=Bad_Name")
	assert.ErrorContains(t, err, "/fullnameOverride")
}

// TestChartServiceAccount: created with its annotations, or an existing
// one bound and run as.
func TestChartServiceAccount(t *testing.T) {
	gke := []string{"testdata/chart-values-gke.yaml"}
	m, _ := mustRenderChart(t, "fleetcast", gke, "serviceAccount.annotations.team=games")
	assert.Equal(t, map[string]string{
		"team":                           "games",
		"iam.gke.io/gcp-service-account": "fleetcast-publisher@my-project.iam.gserviceaccount.com",
	}, m["ServiceAccount/fleetcast/fleetcast-publisher"].GetAnnotations())

	m, _ = mustRenderChart(t, "fleetcast", gke, "serviceAccount.create=false", "serviceAccount.name=existing")
	assert.NotContains(t, m, "ServiceAccount/fleetcast/existing")
	assert.NotContains(t, m, "ServiceAccount/fleetcast/fleetcast-publisher")
	assert.Equal(t, "existing", podSpec(t, m, "Deployment/fleetcast/fleetcast-publisher")["serviceAccountName"])
	for _, key := range []string{"ClusterRoleBinding//fleetcast-publisher", "RoleBinding/fleetcast/fleetcast-publisher"} {
		subjects, _, _ := unstructured.NestedSlice(m[key].Object, "subjects")
		require.Len(t, subjects, 1, key)
		assert.Equal(t, "existing", subjects[0].(map[string]any)["name"], key)
	}
	_, _, err := renderChart(t, "fleetcast", gke, "serviceAccount.create=false", "serviceAccount.name=")
	assert.ErrorContains(t, err, "serviceAccount.name: required with serviceAccount.create false")
}

// TestChartPodSettings: security contexts default to the restricted
// settings and can be changed; labels, priority and spread reach the pods.
func TestChartPodSettings(t *testing.T) {
	gke := []string{"testdata/chart-values-gke.yaml"}
	m, _ := mustRenderChart(t, "fleetcast", gke)
	spec := podSpec(t, m, "Deployment/fleetcast/fleetcast-publisher")
	assert.Equal(t, map[string]any{"runAsNonRoot": true, "runAsUser": float64(65532), "runAsGroup": float64(65532),
		"seccompProfile": map[string]any{"type": "RuntimeDefault"}}, spec["securityContext"])
	c := spec["containers"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
		"capabilities": map[string]any{"drop": []any{"ALL"}}}, c["securityContext"])
	assert.NotContains(t, spec, "priorityClassName")
	assert.NotContains(t, spec, "topologySpreadConstraints")

	values := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(values, []byte(`
podLabels: {team: games, app.kubernetes.io/name: not-this}
priorityClassName: game-critical
podSecurityContext: {runAsUser: 1000, runAsGroup: null, fsGroup: 1000}
securityContext: {readOnlyRootFilesystem: false}
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
  - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {mine: "yes"}}}
`), 0o644))
	m, _ = mustRenderChart(t, "fleetcast", append(gke, values))
	d := m["Deployment/fleetcast/fleetcast-publisher"]
	labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
	assert.Equal(t, "games", labels["team"])
	assert.Equal(t, "fleetcast-publisher", labels["app.kubernetes.io/name"], "podLabels cannot unselect the pods")
	spec = podSpec(t, m, "Deployment/fleetcast/fleetcast-publisher")
	assert.Equal(t, "game-critical", spec["priorityClassName"])
	// Helm merges a map into the default one; null removes a key.
	assert.Equal(t, map[string]any{"runAsNonRoot": true, "runAsUser": float64(1000), "fsGroup": float64(1000),
		"seccompProfile": map[string]any{"type": "RuntimeDefault"}}, spec["securityContext"])
	assert.Equal(t, map[string]any{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": false,
		"capabilities": map[string]any{"drop": []any{"ALL"}}}, spec["containers"].([]any)[0].(map[string]any)["securityContext"])
	spread := spec["topologySpreadConstraints"].([]any)
	require.Len(t, spread, 2)
	assert.Equal(t, map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "fleetcast-publisher", "app.kubernetes.io/part-of": "fleetcast"}},
		spread[0].(map[string]any)["labelSelector"], "the chart's pods by default")
	assert.Equal(t, map[string]any{"matchLabels": map[string]any{"mine": "yes"}}, spread[1].(map[string]any)["labelSelector"])

	_, _, err := renderChart(t, "fleetcast", gke, "topologySpreadConstraints[0].maxSkew=1")
	assert.ErrorContains(t, err, "topologySpreadConstraints", "a constraint without its topologyKey")
}

// TestChartTemplatesWithoutKubeVersion: helm template renders with the
// Kubernetes version a Helm built without its release flags assumes
// (v1.20.0, chartutil's default), as with any other.
func TestChartTemplatesWithoutKubeVersion(t *testing.T) {
	for _, v := range []string{"1.20.0", "1.27.0", "1.34.0"} {
		out, err := exec.CommandContext(t.Context(), helmBinary(t), "template", "fleetcast", "chart", "--kube-version", v,
			"--values", "testdata/chart-values-gke.yaml").CombinedOutput()
		require.NoError(t, err, "Kubernetes %s: %s", v, out)
	}
}
