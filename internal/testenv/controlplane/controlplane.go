// Package controlplane runs a real Kubernetes control plane for tests: etcd
// and kube-apiserver, built from pinned upstream modules by
// scripts/controlplane.sh (make test does it and exports KUBE_APISERVER and
// ETCD). Start one per test package, in TestMain, and share it: it starts
// in about a second.
package controlplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	_ "embed"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/internal/testenv"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// Environment variables naming the binaries, and the one that makes a
// missing control plane a failure rather than a skip.
const (
	APIServerEnv = "KUBE_APISERVER"
	EtcdEnv      = "ETCD"
	RequireEnv   = "REQUIRE_CONTROLPLANE"
)

// FleetCRD, GameServerSetCRD, FleetAutoscalerCRD and GameServerCRD are
// structural subsets of Agones' CRDs, following their schemas for the
// fields the publisher reads (and, of GameServers, an allocation), with
// their subresources. Real clusters install Agones' own.
var (
	//go:embed fleet-crd.yaml
	FleetCRD []byte
	//go:embed gameserverset-crd.yaml
	GameServerSetCRD []byte
	//go:embed fleetautoscaler-crd.yaml
	FleetAutoscalerCRD []byte
	//go:embed gameserver-crd.yaml
	GameServerCRD []byte
)

// ControlPlane is a running etcd and kube-apiserver on loopback ports.
type ControlPlane struct {
	// URL of the API server (https, self-signed).
	URL string
	// AdminToken authenticates as a member of system:masters.
	AdminToken string
	// Kubeconfig is a kubeconfig file for kubectl, as the admin.
	Kubeconfig string
	dir        string
	etcd, api  *proc.Process
}

// Available reports whether the binaries are configured, and if not, why.
func Available() (bool, string) {
	for _, env := range []string{APIServerEnv, EtcdEnv} {
		if os.Getenv(env) == "" {
			return false, fmt.Sprintf("%s is not set; run make test, which builds the control plane (scripts/controlplane.sh build)", env)
		}
	}
	return true, ""
}

// Require ends the test when cp is nil: a failure when REQUIRE_CONTROLPLANE=1,
// a skip otherwise.
func Require(tb testenv.TB, cp *ControlPlane, startErr error) *ControlPlane {
	tb.Helper()
	if cp != nil {
		return cp
	}
	reason := "control plane not started"
	if startErr != nil {
		reason = startErr.Error()
	} else if ok, why := Available(); !ok {
		reason = why
	}
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("needs the Kubernetes control plane: %s", reason)
	}
	tb.Skipf("needs the Kubernetes control plane: %s", reason)
	return nil
}

// StartWithAgonesCRDs is what a test package's TestMain calls: when the
// binaries are configured, it starts a control plane with the Fleet,
// GameServerSet, FleetAutoscaler and GameServer CRDs installed; when not,
// it returns nil and no error, and tests calling
// Require skip or fail.
func StartWithAgonesCRDs() (*ControlPlane, error) {
	if ok, _ := Available(); !ok {
		return nil, nil
	}
	cp, err := Start("")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cp.InstallAgonesCRDs(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// Start starts etcd and kube-apiserver in a new directory under dir and
// waits until the API server is ready. Stop must be called.
func Start(dir string) (*ControlPlane, error) {
	if ok, why := Available(); !ok {
		return nil, errors.New(why)
	}
	dir, err := os.MkdirTemp(dir, "controlplane")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{dir: dir}
	if err := cp.start(); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) start() error {
	clientPort, peerPort, apiPort, err := freePorts()
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + clientPort
	cp.etcd, err = cp.spawn("etcd", os.Getenv(EtcdEnv),
		"--name=default",
		"--data-dir="+filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls=http://127.0.0.1:"+peerPort,
		"--initial-advertise-peer-urls=http://127.0.0.1:"+peerPort,
		"--initial-cluster=default=http://127.0.0.1:"+peerPort,
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	if err := cp.wait(cp.etcd, "etcd", answersOK(testhttp.Client, etcdURL+"/health", "")); err != nil {
		return err
	}

	if err := cp.writeCredentials(); err != nil {
		return err
	}
	cp.URL = "https://127.0.0.1:" + apiPort
	cp.api, err = cp.spawn("kube-apiserver", os.Getenv(APIServerEnv),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// No kubernetes Service endpoints to maintain on loopback.
		"--endpoint-reconciler-type=none",
		"--secure-port="+apiPort,
		"--cert-dir="+filepath.Join(cp.dir, "certs"),
		"--service-account-key-file="+filepath.Join(cp.dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(cp.dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--token-auth-file="+filepath.Join(cp.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/24",
		"--enable-priority-and-fairness=false",
	)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}, Timeout: 2 * time.Second}
	if err := cp.wait(cp.api, "kube-apiserver", answersOK(client, cp.URL+"/readyz", cp.AdminToken)); err != nil {
		return err
	}
	return cp.writeKubeconfig()
}

// answersOK returns a probe: does GET url (with a bearer token, if any)
// answer 200?
func answersOK(client *http.Client, url, token string) func() bool {
	return func() bool {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

func (cp *ControlPlane) writeCredentials() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	cp.AdminToken = hex.EncodeToString(token)
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(cp.AdminToken + `,admin,admin-uid,"system:masters"` + "\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(cp.dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (cp *ControlPlane) writeKubeconfig() error {
	cp.Kubeconfig = filepath.Join(cp.dir, "kubeconfig")
	return os.WriteFile(cp.Kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, cp.URL, cp.AdminToken)), 0o600)
}

// spawn starts a binary with its output in a log file of the directory.
func (cp *ControlPlane) spawn(name, bin string, args ...string) (*proc.Process, error) {
	logf, err := os.Create(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(name, bin, proc.Options{Args: args, Stdout: logf, Stderr: logf, Grace: 10 * time.Second})
	if err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		<-p.Done()
		logf.Close()
	}()
	return p, nil
}

// wait waits until ready holds, with the end of the log when it fails.
func (cp *ControlPlane) wait(p *proc.Process, name string, ready func() bool) error {
	if err := p.WaitReady(context.Background(), 60*time.Second, ready); err != nil {
		return fmt.Errorf("%w:\n%s", err, cp.tail(name))
	}
	return nil
}

func (cp *ControlPlane) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(cp.dir, name+".log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// Stop stops the API server, then etcd (graceful shutdown of the API server
// can hang once etcd is gone), each with SIGINT and after 10 s SIGKILL, and
// removes the directory.
func (cp *ControlPlane) Stop() {
	for _, p := range []*proc.Process{cp.api, cp.etcd} {
		if p != nil {
			p.Stop()
		}
	}
	_ = os.RemoveAll(cp.dir)
}

// RESTConfig returns a client configuration authenticated as the admin.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return cp.RESTConfigWithToken(cp.AdminToken)
}

// RESTConfigWithToken returns a client configuration using a bearer token,
// for example a ServiceAccount's.
func (cp *ControlPlane) RESTConfigWithToken(token string) *rest.Config {
	return &rest.Config{
		Host:            cp.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             200,
		Burst:           400,
	}
}

// Kubectl runs kubectl against the control plane as the admin.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallAgonesCRDs creates the Fleet, GameServerSet, FleetAutoscaler and
// GameServer CRDs (unless they exist) and waits until they are
// established.
func (cp *ControlPlane) InstallAgonesCRDs(ctx context.Context) error {
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	var crds []*unstructured.Unstructured
	for _, manifest := range [][]byte{FleetCRD, GameServerSetCRD, FleetAutoscalerCRD, GameServerCRD} {
		var obj map[string]any
		if err := yaml.Unmarshal(manifest, &obj); err != nil {
			return fmt.Errorf("parse CRD: %w", err)
		}
		crd := &unstructured.Unstructured{Object: obj}
		if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("create CRD %s: %w", crd.GetName(), err)
		}
		crds = append(crds, crd)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, crd := range crds {
		for {
			got, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err == nil && established(got) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established after 30 s", crd.GetName())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func freePorts() (string, string, string, error) {
	var ports []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", "", err
		}
		ls = append(ls, l)
		ports = append(ports, fmt.Sprint(l.Addr().(*net.TCPAddr).Port))
	}
	return ports[0], ports[1], ports[2], nil
}
