// Package testenv is what the tests run against, each in a package of its
// own: the Kubernetes control plane (controlplane), the Google emulators
// (emulator), Agones objects and in-process publishers on them (kubetest),
// headless Chromium (browsertest), watch streams read as one kind of event
// (watchtest), child processes (proc), a buffer shared with goroutines
// (syncbuf), an in-memory store of fleet documents (fleetapitest) and
// certificate authorities for TLS and mutual TLS (tlstest).
//
// make demo runs on the same control plane, emulators and processes, so a
// harness a program links never imports testing: it takes the test's
// testing.TB as a TB, the part of it a harness calls.
package testenv

import "os"

// TB is the part of testing.TB a harness calls: a *testing.T or
// *testing.B is one.
type TB interface {
	Helper()
	Cleanup(func())
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Skipf(format string, args ...any)
}

// Helm is the helm binary make test builds ($HELM: scripts/helm.sh, from
// the pinned module in tools/helm). Without it a test fails under
// REQUIRE_HELM=1, as make test sets, and skips otherwise.
func Helm(tb TB) string {
	tb.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if os.Getenv("REQUIRE_HELM") == "1" {
		tb.Fatal("HELM is not set; run make test, which builds Helm (scripts/helm.sh path)")
	}
	tb.Skip("HELM is not set; make test builds Helm (scripts/helm.sh path)")
	return ""
}
