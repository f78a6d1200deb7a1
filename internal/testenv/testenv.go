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
