package fleetview

import "github.com/fleetcast/fleetcast/fleet"

// DocBytes estimates the heap a document takes in the view: its fixed part
// (the document, its status, its entry and its place in the view's tree),
// each string, and each map entry with the map's overhead (measured: a label
// of 314 bytes takes about 410, a counter about 100), and each label's
// place in the index at most (indexBytesPerLabel and a copy of the label in
// its list's key: a label no other fleet has costs a list of its own).
// BenchmarkInstanceMemory holds it against the heap.
// The view and the feed are bounded by it.
func DocBytes(d *fleet.Document) int {
	if d == nil {
		return 0
	}
	const fixed, entry, aggregate = 1280, 64, 48
	n := fixed + len(d.Cluster) + len(d.Namespace) + len(d.Name) + len(d.UID) + len(d.DocID) + len(d.Degraded) +
		len(d.Publisher.ID) + len(d.Publisher.Version)
	for k, v := range d.Labels {
		n += entry + indexBytesPerLabel + 2*(len(k)+len(v))
	}
	for k, v := range d.Annotations {
		n += entry + len(k) + len(v)
	}
	for k, v := range d.GameServerLabels {
		n += entry + len(k) + len(v)
	}
	if d.Status != nil {
		for k := range d.Status.Counters {
			n += entry + aggregate + len(k)
		}
		for k := range d.Status.Lists {
			n += entry + aggregate + len(k)
		}
	}
	if d.Rollout != nil {
		for _, s := range d.Rollout.Sets {
			n += entry + len(s.Name)
		}
	}
	for _, a := range d.Autoscalers {
		n += 2*entry + len(a.Name) + len(a.Policy.Type) + len(a.Policy.BufferSize) + len(a.Policy.Key) + len(a.Policy.WebhookHost)
	}
	return n
}
