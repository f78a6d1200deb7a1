package publisher_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
)

// secretData is a rendered or stored Secret's data, decoded.
func secretData(tb testing.TB, obj *unstructured.Unstructured) map[string][]byte {
	tb.Helper()
	data, _, err := unstructured.NestedStringMap(obj.Object, "data")
	require.NoError(tb, err)
	out := map[string][]byte{}
	for k, v := range data {
		b, err := base64.StdEncoding.DecodeString(v)
		require.NoError(tb, err, k)
		out[k] = b
	}
	return out
}

// verify checks that certPEM chains to caPEM for usage, and for name when
// it is a server's.
func verify(tb testing.TB, caPEM, certPEM []byte, usage x509.ExtKeyUsage, name string) {
	tb.Helper()
	roots := x509.NewCertPool()
	require.True(tb, roots.AppendCertsFromPEM(caPEM))
	block, _ := pem.Decode(certPEM)
	require.NotNil(tb, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(tb, err)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}})
	assert.NoError(tb, err, "%s certificate %s", usage, cert.Subject)
}

func volumes(tb testing.TB, m manifests, ns string) []any {
	tb.Helper()
	v, _, _ := unstructured.NestedSlice(m["Deployment/"+ns+"/fleetcast-publisher"].Object, "spec", "template", "spec", "volumes")
	return v
}

// TestChartTemplatesInformationService: single-cluster mode adds the port,
// the Service and the certificates of the source chosen, and gives the
// publisher the flags that serve them; without publishing, it needs no
// project and no Google identity.
func TestChartTemplatesInformationService(t *testing.T) {
	gke := []string{"testdata/chart-values-gke.yaml"}
	m, _ := mustRenderChart(t, "fleetcast", gke, "informationService.enabled=true")
	for _, key := range []string{"Service/fleetcast/fleetcast-publisher-information", "Secret/fleetcast/fleetcast-publisher-information-tls", "Secret/fleetcast/fleetcast-publisher-information-client"} {
		assert.Contains(t, m, key)
	}
	server := secretData(t, m["Secret/fleetcast/fleetcast-publisher-information-tls"])
	client := secretData(t, m["Secret/fleetcast/fleetcast-publisher-information-client"])
	assert.Equal(t, server["ca.crt"], client["ca.crt"], "one CA signs both")
	for _, name := range []string{"fleetcast-publisher-information", "fleetcast-publisher-information.fleetcast.svc", "fleetcast-publisher-information.fleetcast.svc.cluster.local"} {
		verify(t, server["ca.crt"], server["tls.crt"], x509.ExtKeyUsageServerAuth, name)
	}
	verify(t, client["ca.crt"], client["tls.crt"], x509.ExtKeyUsageClientAuth, "")
	_, err := tls.X509KeyPair(server["tls.crt"], server["tls.key"])
	require.NoError(t, err)

	cfg := configOf(t, m, "p")
	assert.Equal(t, ":8443", cfg.GRPCAddr)
	assert.Equal(t, "/etc/fleetcast/information-tls/tls.crt", cfg.TLSCertFile)
	assert.Equal(t, "/etc/fleetcast/information-tls/tls.key", cfg.TLSPrivateKeyFile)
	assert.Equal(t, "/etc/fleetcast/information-tls/ca.crt", cfg.ClientCAFile, "mutual TLS by default")
	assert.True(t, cfg.Publish)
	c := container(t, m)
	assert.Contains(t, fmt.Sprint(c["ports"]), "map[containerPort:8443 name:grpc]")
	assert.Contains(t, c["volumeMounts"], map[string]any{"name": "information-tls", "mountPath": "/etc/fleetcast/information-tls", "readOnly": true})
	assert.Contains(t, volumes(t, m, "fleetcast"), map[string]any{"name": "information-tls", "secret": map[string]any{"secretName": "fleetcast-publisher-information-tls"}})
	svcType, _, _ := unstructured.NestedString(m["Service/fleetcast/fleetcast-publisher-information"].Object, "spec", "type")
	assert.Equal(t, "ClusterIP", svcType)
	assert.NotContains(t, m, "NetworkPolicy/fleetcast/fleetcast-publisher-information")
}

// TestChartInformationServiceWithAnExistingSecret: the chart makes no
// certificate and mounts the Secret; a LoadBalancer and a NetworkPolicy
// as asked.
func TestChartInformationServiceWithAnExistingSecret(t *testing.T) {
	gke := []string{"testdata/chart-values-gke.yaml"}
	m, _ := mustRenderChart(t, "fleetcast", gke, "informationService.enabled=true", "informationService.tls.source=secret", "informationService.tls.secretName=studio-tls",
		"informationService.service.type=LoadBalancer", "informationService.service.loadBalancerSourceRanges={10.0.0.0/8}",
		"informationService.networkPolicy.enabled=true", "informationService.networkPolicy.from[0].namespaceSelector.matchLabels.team=matchmaking")
	assert.NotContains(t, m, "Secret/fleetcast/fleetcast-publisher-information-tls")
	assert.NotContains(t, m, "Secret/fleetcast/fleetcast-publisher-information-client")
	assert.Contains(t, volumes(t, m, "fleetcast"), map[string]any{"name": "information-tls", "secret": map[string]any{"secretName": "studio-tls"}})
	svc := m["Service/fleetcast/fleetcast-publisher-information"].Object
	svcType, _, _ := unstructured.NestedString(svc, "spec", "type")
	assert.Equal(t, "LoadBalancer", svcType)
	ranges, _, _ := unstructured.NestedStringSlice(svc, "spec", "loadBalancerSourceRanges")
	assert.Equal(t, []string{"10.0.0.0/8"}, ranges)
	np := m["NetworkPolicy/fleetcast/fleetcast-publisher-information"]
	require.NotNil(t, np)
	ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	require.Len(t, ingress, 2, "the gRPC port from the listed peers, the metrics port from anyone")
	assert.Equal(t, []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "matchmaking"}}}}, ingress[0].(map[string]any)["from"])

}

// TestChartInformationServiceOtherSources: cert-manager, serving only,
// plaintext, and the values refused.
func TestChartInformationServiceOtherSources(t *testing.T) {
	gke := []string{"testdata/chart-values-gke.yaml"}
	// cert-manager issues it into the chart's Secret name.
	m, _ := mustRenderChart(t, "fleetcast", gke, "informationService.enabled=true", "informationService.tls.source=certManager",
		"informationService.tls.certManager.issuerRef.name=studio-ca", "informationService.tls.dnsNames={fleets.example.com}")
	crt := m["Certificate/fleetcast/fleetcast-publisher-information"]
	require.NotNil(t, crt)
	secretName, _, _ := unstructured.NestedString(crt.Object, "spec", "secretName")
	assert.Equal(t, "fleetcast-publisher-information-tls", secretName)
	dns, _, _ := unstructured.NestedStringSlice(crt.Object, "spec", "dnsNames")
	assert.Contains(t, dns, "fleets.example.com")
	assert.Contains(t, dns, "fleetcast-publisher-information.fleetcast.svc")

	// Serving only: no project, no Google identity, every replica serves.
	m, _ = mustRenderChart(t, "fleetcast", nil, testImage, "cluster=solo", "publish=false", "informationService.enabled=true",
		"informationService.tls.mutual=false", "leaderElection.enabled=false", "replicas=2")
	cfg := configOf(t, m, "p")
	assert.False(t, cfg.Publish)
	assert.Empty(t, cfg.Project)
	assert.Empty(t, cfg.ClientCAFile, "tls.mutual false: no client certificate asked for")
	assert.Empty(t, m["ServiceAccount/fleetcast/fleetcast-publisher"].GetAnnotations(), "no Workload Identity to act as")

	// Plaintext, asked for: no certificates at all.
	m, _ = mustRenderChart(t, "fleetcast", nil, testImage, "cluster=solo", "publish=false", "informationService.enabled=true", "informationService.plaintext=true")
	cfg = configOf(t, m, "p")
	assert.True(t, cfg.GRPCPlaintext)
	assert.Empty(t, cfg.TLSCertFile)
	assert.NotContains(t, container(t, m), "volumeMounts")
	assert.NotContains(t, m, "Secret/fleetcast/fleetcast-publisher-information-tls")

	for set, want := range map[string]string{
		"publish=false":                             "without informationService.enabled",
		"informationService.tls.source=secret":      "informationService.tls.secretName: required",
		"informationService.tls.source=certManager": "informationService.tls.certManager.issuerRef.name: required",
		"informationService.tls.source=vault":       "/informationService/tls/source",
	} {
		_, _, err := renderChart(t, "fleetcast", gke, "informationService.enabled="+map[bool]string{true: "false", false: "true"}[set == "publish=false"], set)
		require.Error(t, err, set)
		assert.Contains(t, err.Error(), want, set)
	}
}

// TestChartInformationServiceInstallsAndServes: helm installs the chart
// with generated certificates on the control plane, an upgrade keeps them,
// and a publisher configured as the chart configures its pods — running as
// the chart's service account, with the Secret's files — serves Inform to
// a grpc-go client holding the chart's client certificate, which names the
// server by its Service's DNS name.
func TestChartInformationServiceInstallsAndServes(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	e := newNamespace(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	release := e.Name + "-info"
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release}}, metav1.CreateOptions{})
	require.NoError(t, err)
	set := []string{testImage, "cluster=helm-info", "namespaces={" + e.Name + "}", "publish=false", "informationService.enabled=true"}
	install := func() {
		t.Helper()
		args := []string{"upgrade", "--install", "fleetcast", "chart", "--namespace", release, "--kubeconfig", c.Kubeconfig}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := exec.CommandContext(ctx, helmBinary(t), args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "fleetcast-publisher-information-client", "NOTES.txt says where the client certificate is")
	}
	stored := func(name string) map[string][]byte {
		s, err := kube.CoreV1().Secrets(release).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		return s.Data
	}
	install()
	server, client := stored("fleetcast-publisher-information-tls"), stored("fleetcast-publisher-information-client")
	install()
	assert.Equal(t, server, stored("fleetcast-publisher-information-tls"), "an upgrade keeps the certificates")
	assert.Equal(t, client, stored("fleetcast-publisher-information-client"))

	tok, err := kube.CoreV1().ServiceAccounts(release).CreateToken(ctx, "fleetcast-publisher",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	rendered, _ := mustRenderChart(t, release, nil, append([]string{testImage}, set...)...)
	cfg := configOf(t, rendered, "fleetcast-publisher-0")
	dir := tlstest.Dir(t)
	cfg.GRPCAddr, cfg.MetricsAddr = freeAddr(t), "" // the test's ports, not the pod's
	cfg.TLSCertFile = tlstest.Write(t, dir, "tls.crt", server["tls.crt"])
	cfg.TLSPrivateKeyFile = tlstest.Write(t, dir, "tls.key", server["tls.key"])
	cfg.ClientCAFile = tlstest.Write(t, dir, "ca.crt", server["ca.crt"])
	e.CreateFleet(e.Name, "charted", map[string]string{"platform": "pc"})
	kubetest.StartPublisher(t, cfg, c.RESTConfigWithToken(tok.Status.Token), nil)

	pair, err := tls.X509KeyPair(client["tls.crt"], client["tls.key"])
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(client["ca.crt"]))
	conn := informClientNamed(t, cfg.GRPCAddr, roots, &pair, "fleetcast-publisher-information."+release+".svc")
	require.Eventually(t, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := conn.Inform(rctx, &fleetcastv1.InformRequest{})
		require.NoError(t, err)
		return len(resp.GetFleetInformation()) == 1 && strings.HasPrefix(resp.GetFleetInformation()[0].GetFleetName(), "charted")
	}, waitTime, 50*time.Millisecond)
}
