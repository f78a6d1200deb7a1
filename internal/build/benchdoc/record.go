package benchdoc

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Machine describes where the run happened.
type Machine struct {
	Date, CPU, OS, Go, Memory, CloudSDK, FirestoreEmulator, PubSubEmulator, KubeAPIServer, Etcd string
	Cores                                                                                       int
}

// machineFields are Machine's recorded lines: machine-<key>: <value>.
func (m *Machine) fields() []struct {
	key string
	v   *string
} {
	return []struct {
		key string
		v   *string
	}{{"date", &m.Date}, {"cpu", &m.CPU}, {"memory", &m.Memory}, {"os", &m.OS}, {"go", &m.Go},
		{"cloud-sdk", &m.CloudSDK}, {"firestore-emulator", &m.FirestoreEmulator}, {"pubsub-emulator", &m.PubSubEmulator},
		{"kube-apiserver", &m.KubeAPIServer}, {"etcd", &m.Etcd}}
}

// Record writes the lines that say what a run measured and where, which
// make bench puts before the benchmarks' output: the document names that
// commit and that machine, never the ones it is rendered on.
func Record(w io.Writer, src Source, m Machine) error {
	var b strings.Builder
	fmt.Fprintf(&b, "fleetcast-commit: %s\nfleetcast-modified: %t\n", src.Commit, src.Modified)
	for _, f := range m.fields() {
		if strings.ContainsAny(*f.v, "\n\r") {
			return fmt.Errorf("machine-%s: %q spans lines", f.key, *f.v)
		}
		fmt.Fprintf(&b, "machine-%s: %s\n", f.key, *f.v)
	}
	fmt.Fprintf(&b, "machine-cores: %d\n", m.Cores)
	_, err := io.WriteString(w, b.String())
	return err
}

// readRecords fills the run's Source and Machine from its recorded lines;
// every one of them must be there.
func (r *Run) readRecords(records map[string]string) error {
	get := func(key string) (string, error) {
		v, ok := records[key]
		if !ok {
			return "", fmt.Errorf("the run does not record %s: make bench writes it before the benchmarks (benchdoc -record)", key)
		}
		return v, nil
	}
	var err error
	if r.Source.Commit, err = get("fleetcast-commit"); err != nil {
		return err
	}
	if !commitHash.MatchString(r.Source.Commit) {
		return fmt.Errorf("fleetcast-commit %q is not a full commit hash", r.Source.Commit)
	}
	modified, err := get("fleetcast-modified")
	if err != nil {
		return err
	}
	if r.Source.Modified, err = strconv.ParseBool(modified); err != nil {
		return fmt.Errorf("fleetcast-modified: %w", err)
	}
	for _, f := range r.Machine.fields() {
		if *f.v, err = get("machine-" + f.key); err != nil {
			return err
		}
	}
	cores, err := get("machine-cores")
	if err != nil {
		return err
	}
	if r.Machine.Cores, err = strconv.Atoi(cores); err != nil || r.Machine.Cores < 1 {
		return fmt.Errorf("machine-cores %q is not a count of cores", cores)
	}
	return nil
}
