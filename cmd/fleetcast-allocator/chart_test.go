package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/fleetcast/fleetcast/allocator"
	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/internal/testenv"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
)

// chartValues are a studio's values: its project, an image, the
// policies of two clusters (pc's allocator reached at the endpoint it
// advertises, xbox's named), and the load balancer's address for the
// generated certificate.
const chartValues = `
project: PROJECT
identity: {type: none}
image: {repository: europe-west1-docker.pkg.dev/my-project/fleetcast/fleetcast-allocator}
tls: {ipAddresses: [127.0.0.1]}
policies:
  - apiVersion: multicluster.agones.dev/v1
    kind: GameServerAllocationPolicy
    metadata: {name: pc}
    spec:
      priority: 0
      weight: 1
      connectionInfo: {clusterName: pc, secretName: allocator-client-pc}
  - apiVersion: multicluster.agones.dev/v1
    kind: GameServerAllocationPolicy
    metadata: {name: xbox, labels: {platform: xbox}}
    spec:
      priority: 1
      weight: 1
      connectionInfo: {clusterName: xbox, secretName: allocator-client-xbox, allocationEndpoints: [192.0.2.1], namespace: games}
`

// render runs helm template on the chart with the values and --set
// values, and returns its objects by kind/name, or Helm's error.
func render(t *testing.T, values string, set ...string) (map[string]*unstructured.Unstructured, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(file, []byte(values), 0o644))
	args := []string{"template", "fleetcast-allocator", "chart", "--namespace", "fleetcast", "--values", file}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), testenv.Helm(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(strings.TrimSpace(stderr.String()))
	}
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objs, nil
		} else {
			require.NoError(t, err)
		}
		if len(obj) > 0 {
			u := &unstructured.Unstructured{Object: obj}
			objs[u.GetKind()+"/"+u.GetName()] = u
		}
	}
}

// kubelet writes what the pod's volumes hold under root, at their mount
// paths, as the kubelet mounts them: a ConfigMap's keys and a Secret's
// (decoded) as files; the Secrets the chart does not make come from
// secrets, as the studio creates them.
func kubelet(t *testing.T, objs map[string]*unstructured.Unstructured, secrets map[string]map[string][]byte, root string) {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(objs["Deployment/fleetcast-allocator"].Object, "spec", "template", "spec")
	volumes := map[string]map[string]any{}
	for _, v := range spec["volumes"].([]any) {
		volumes[v.(map[string]any)["name"].(string)] = v.(map[string]any)
	}
	for _, m := range spec["containers"].([]any)[0].(map[string]any)["volumeMounts"].([]any) {
		m := m.(map[string]any)
		v := volumes[m["name"].(string)]
		require.NotNil(t, v, "mount %v of no volume", m)
		files := map[string][]byte{}
		switch {
		case v["configMap"] != nil:
			cm := objs["ConfigMap/"+v["configMap"].(map[string]any)["name"].(string)]
			require.NotNil(t, cm, "volume %v: the chart makes no such ConfigMap", v)
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			for k, s := range data {
				files[k] = []byte(s)
			}
		case v["secret"] != nil:
			name := v["secret"].(map[string]any)["secretName"].(string)
			if s := objs["Secret/"+name]; s != nil {
				data, _, _ := unstructured.NestedStringMap(s.Object, "data")
				for k, b64 := range data {
					b, err := base64.StdEncoding.DecodeString(b64)
					require.NoError(t, err)
					files[k] = b
				}
			} else {
				require.Contains(t, secrets, name, "volume %v: a Secret neither the chart nor the studio makes", v)
				files = secrets[name]
			}
		default:
			t.Fatalf("volume %v: not a ConfigMap or Secret", v)
		}
		dir := filepath.Join(root, m["mountPath"].(string))
		require.NoError(t, os.MkdirAll(dir, 0o700))
		for k, b := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, k), b, 0o600))
		}
	}
}

// TestTheChartsPodServes: the chart's Deployment, its files mounted as
// the kubelet would and its arguments and environment as rendered (only
// the ports moved to the loopback), runs the allocator; a matchmaker with
// the client certificate the chart generated allocates through it from
// the cluster the policies put first, which the forwarder reaches with
// that policy's Secret.
func TestTheChartsPodServes(t *testing.T) {
	f := newFiles(t)
	pc := &stub{free: []string{"ranked-abcde"}}
	endpoint := f.serveStub(t, pc)
	project := emulator.ProjectID(t)
	store := firestoredb.New(emulator.Firestore(t, project), time.Hour, time.Now)
	part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
	part.FleetCount, part.AllocatorEndpoint = 1, endpoint
	for seq, ev := range []fleet.Event{{Kind: fleet.KindSnapshot, Snapshot: part}, {Kind: fleet.KindUpsert, Namespace: "default", Name: "ranked",
		Fleet: fleet.State{UID: "u", GameServerLabels: map[string]string{"mode": "ranked"}, Status: fleet.Status{Replicas: 3, ReadyReplicas: 3}}}} {
		ev.SchemaVersion, ev.Cluster, ev.Version = fleet.SchemaVersion, "pc", fleet.Version{Term: 1, Seq: int64(seq + 1)}
		ev.Publisher, ev.ObservedAt = fleet.Publisher{ID: "pub-pc", Version: "test"}, fleet.MicrosOf(time.Now())
		_, err := store.Apply(t.Context(), ev)
		require.NoError(t, err)
	}

	objs, err := render(t, strings.Replace(chartValues, "PROJECT", project, 1))
	require.NoError(t, err)
	root := t.TempDir()
	client := f.agones.Client(t, "fleetcast-allocator")
	studio := map[string][]byte{allocator.SecretCert: client.Cert, allocator.SecretKey: client.Key, allocator.SecretCA: f.agones.PEM}
	kubelet(t, objs, map[string]map[string][]byte{"allocator-client-pc": studio, "allocator-client-xbox": studio}, root)

	c := objs["Deployment/fleetcast-allocator"].Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	var args []string
	for _, a := range c["args"].([]any) {
		a := a.(string)
		switch {
		case strings.HasPrefix(a, "--addr="):
			a = "--addr=127.0.0.1:0"
		case strings.HasPrefix(a, "--metrics-addr="):
			a = "--metrics-addr="
		}
		args = append(args, strings.ReplaceAll(a, "=/", "="+root+"/"))
	}
	env := map[string]string{emulator.FirestoreHostEnv: os.Getenv(emulator.FirestoreHostEnv), "MAX_STALENESS": "0"}
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		env[e["name"].(string)] = e["value"].(string)
	}
	assert.Equal(t, "460MiB", env["GOMEMLIMIT"], "90% of limits.memory")

	ctx, cancel := context.WithCancel(t.Context())
	stderr := &syncbuf.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, func(k string) string { return env[k] }, io.Discard, stderr) }()
	var ended error
	require.Eventually(t, func() bool {
		select {
		case ended = <-done:
			return true
		default:
		}
		return serving.MatchString(stderr.String())
	}, 30*time.Second, 10*time.Millisecond, "it serves, or ends")
	require.False(t, ended != nil || !serving.MatchString(stderr.String()), "the allocator ended: %v: %s", ended, stderr.String())
	assert.Contains(t, stderr.String(), "mutual TLS), 2 policies")
	addr := serving.FindStringSubmatch(stderr.String())[1]

	// The matchmakers' certificate the chart generated, with the CA that
	// signed the server's.
	matchmaker := map[string][]byte{}
	data, _, _ := unstructured.NestedStringMap(objs["Secret/fleetcast-allocator-client"].Object, "data")
	for k, b64 := range data {
		matchmaker[k], err = base64.StdEncoding.DecodeString(b64)
		require.NoError(t, err)
	}
	pair, err := tls.X509KeyPair(matchmaker["tls.crt"], matchmaker["tls.key"])
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(matchmaker["ca.crt"]))
	dial := func(certs []tls.Certificate) pb.AllocationServiceClient {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{Certificates: certs, RootCAs: roots, MinVersion: tls.VersionTLS12})))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cc.Close() })
		return pb.NewAllocationServiceClient(cc)
	}
	req := &pb.AllocationRequest{GameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "ranked"}}}}
	resp, err := dial([]tls.Certificate{pair}).Allocate(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, "ranked-abcde", resp.GetGameServerName())
	assert.Equal(t, endpoint, resp.GetSource())

	actx, acancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer acancel()
	_, err = dial(nil).Allocate(actx, req)
	assert.Equal(t, codes.Unavailable, status.Code(err), "mutual TLS: no client certificate, no allocation: %v", err)

	cancel()
	require.NoError(t, <-done)
}

// TestTheChartRefusesWhatTheAllocatorWould: each mistake fails the
// install with a message naming the value.
func TestTheChartRefusesWhatTheAllocatorWould(t *testing.T) {
	values := strings.Replace(chartValues, "PROJECT", "my-project", 1)
	for set, want := range map[string]string{
		"project=": "project: required",
		"image.repository=REGION-docker.pkg.dev/PROJECT/fleetcast/fleetcast-allocator": "is the chart's placeholder",
		"policies[0].spec.connectionInfo.secretName=":                                  "policies[0] (cluster pc): spec.connectionInfo.secretName: required",
		"policies[1].kind=ConfigMap":                                                   `policies[1]: apiVersion "multicluster.agones.dev/v1", kind "ConfigMap"`,
		"tls.source=secret":                                                            "tls.secretName: required with tls.source secret",
		"tls.source=cert-manager":                                                      `tls.source "cert-manager": want generated or secret`,
		"identity.type=gke":                                                            `identity.serviceAccount "": required with identity.type gke`,
		"serviceAccount.create=false":                                                  "serviceAccount.name: required",
	} {
		_, err := render(t, values, set)
		require.Error(t, err, set)
		assert.Contains(t, err.Error(), want, set)
	}
	_, err := render(t, "project: p\nidentity: {type: none}\nimage: {repository: r/fleetcast-allocator}\n")
	assert.ErrorContains(t, err, "policies: required")
}

// TestTheChartsOptions: existing Secrets as agones-allocator's, mutual TLS
// off, Workload Identity, a memory limit in Gi, and helm lint --strict.
func TestTheChartsOptions(t *testing.T) {
	values := strings.Replace(chartValues, "PROJECT", "my-project", 1)
	objs, err := render(t, values, "tls.source=secret", "tls.secretName=allocator-tls", "tls.clientCASecretName=allocator-client-ca",
		"identity.type=gke", "identity.serviceAccount=fleetcast-allocator@my-project.iam.gserviceaccount.com", "resources.limits.memory=1Gi")
	require.NoError(t, err)
	assert.NotContains(t, objs, "Secret/fleetcast-allocator-tls", "the studio's own")
	assert.Equal(t, "fleetcast-allocator@my-project.iam.gserviceaccount.com", objs["ServiceAccount/fleetcast-allocator"].GetAnnotations()["iam.gke.io/gcp-service-account"])
	spec, _, _ := unstructured.NestedMap(objs["Deployment/fleetcast-allocator"].Object, "spec", "template", "spec")
	var secrets []string
	for _, v := range spec["volumes"].([]any) {
		if s, ok := v.(map[string]any)["secret"].(map[string]any); ok {
			secrets = append(secrets, s["secretName"].(string))
		}
	}
	assert.Equal(t, []string{"allocator-tls", "allocator-client-ca", "allocator-client-pc", "allocator-client-xbox"}, secrets)
	c := spec["containers"].([]any)[0].(map[string]any)
	assert.Contains(t, c["env"], map[string]any{"name": "GOMEMLIMIT", "value": "921MiB"})

	objs, err = render(t, values, "tls.disableMTLS=true")
	require.NoError(t, err)
	spec, _, _ = unstructured.NestedMap(objs["Deployment/fleetcast-allocator"].Object, "spec", "template", "spec")
	args := spec["containers"].([]any)[0].(map[string]any)["args"].([]any)
	assert.Contains(t, args, "--disable-mtls")
	for _, a := range args {
		assert.NotContains(t, a, "--client-ca-dir")
	}
	for _, v := range spec["volumes"].([]any) {
		assert.NotEqual(t, "client-ca", v.(map[string]any)["name"], "no client CA mounted")
	}

	// make chart lints it with these values.
	lint, err := os.ReadFile("testdata/chart-values.yaml")
	require.NoError(t, err)
	assert.Contains(t, string(lint), strings.TrimPrefix(values, "\n"), "testdata/chart-values.yaml holds the tests' values")
	out, err := exec.CommandContext(t.Context(), testenv.Helm(t), "lint", "--strict", "chart", "--values", "testdata/chart-values.yaml").CombinedOutput()
	require.NoError(t, err, "%s", out)
}
