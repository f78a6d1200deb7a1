package fleet

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SchemaVersion is the version of the event contract this code reads and
// writes (schemas/fleet_event.avsc). It changes only for incompatible
// changes; compatible ones add fields with defaults and keep it.
const SchemaVersion = 1

// MaxEventBytes bounds an encoded event: Pub/Sub's limit for one message.
const MaxEventBytes = 10_000_000

// MaxUpsertBytes bounds an encoded upsert, keeping one fleet's Firestore
// document (limit 1 MiB) small enough to read and listen to cheaply.
const MaxUpsertBytes = 256 << 10

// Kind says what an event means.
type Kind string

// The kinds of event. Their spellings are the symbols of the Avro enum.
const (
	KindUpsert   Kind = "FLEET_UPSERT"
	KindDelete   Kind = "FLEET_DELETE"
	KindSnapshot Kind = "CLUSTER_SNAPSHOT"
)

// Publisher identifies the publisher instance that sent an event.
type Publisher struct {
	// ID names the instance, typically its pod name.
	ID string `json:"id" firestore:"id"`
	// Version is the publisher's software version.
	Version string `json:"version" firestore:"version"`
}

// Event is one message on the fleet events topic. Its JSON form is the Avro
// JSON encoding of schemas/fleet_event.avsc: every field is always present
// (the schema has no unions), and the fields a kind does not use hold their
// zero values.
type Event struct {
	SchemaVersion int       `json:"schemaVersion"`
	Kind          Kind      `json:"kind"`
	Cluster       string    `json:"cluster"`
	Version       Version   `json:"version"`
	ObservedAt    Micros    `json:"observedAt"`
	Publisher     Publisher `json:"publisher"`
	// Namespace and Name identify the fleet of an upsert or delete.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Fleet is the state an upsert carries.
	Fleet State `json:"fleet"`
	// Snapshot is the content of a CLUSTER_SNAPSHOT.
	Snapshot Snapshot `json:"snapshot"`
}

// Micros is a point in time in microseconds since the Unix epoch: Avro's
// timestamp-micros, and Firestore's timestamp precision.
type Micros int64

// MaxMicros is the last microsecond of year 9999: the latest time that
// RFC 3339, Go's JSON encoding of a time and a protobuf Timestamp can all
// express. No time an event carries may be later, or no answer holding it
// could be encoded.
const MaxMicros Micros = 253402300799_999999

// MicrosOf converts t, truncating to microseconds.
func MicrosOf(t time.Time) Micros { return Micros(t.UnixMicro()) }

// Time converts m back to a time.Time in UTC.
func (m Micros) Time() time.Time { return time.UnixMicro(int64(m)).UTC() }

// Key returns the fleet key of an upsert or delete.
func (e Event) Key() Key { return Key{Cluster: e.Cluster, Namespace: e.Namespace, Name: e.Name} }

// Snapshot lists the live fleets of one cluster in one key range. A large
// cluster's snapshot is split into parts that share the event's version and
// each cover a half-open range [Start, End) of (namespace, name) in key
// order, so every part can be reconciled on its own, in any order.
type Snapshot struct {
	Part  int `json:"part"`
	Parts int `json:"parts"`
	// Start is the first key the part covers; zero means from the first.
	Start FleetRef `json:"start"`
	// End is the first key after the part; zero means to the last.
	End FleetRef `json:"end"`
	// Fleets are the live fleets in the range, sorted by key, with the
	// version of the last event the publisher sent for each.
	Fleets []SnapshotEntry `json:"fleets"`
	// ClusterLabels describe the cluster (platform, region, ...).
	ClusterLabels map[string]string `json:"clusterLabels"`
	// FleetCount and Totals are over the whole cluster, in every part.
	FleetCount int64  `json:"fleetCount"`
	Totals     Status `json:"totals"`
	// TotalsTruncated reports that the cluster's fleets name more counters
	// or lists than a status may hold: Totals keeps the MaxAggregates of
	// each with the largest capacity. Added after schemaVersion 1's first
	// release, with a default: older publishers omit it.
	TotalsTruncated bool `json:"totalsTruncated"`
	// AllocatorEndpoint is where matchmakers allocate in the cluster, its
	// Agones allocator service's host:port; empty when not advertised.
	// Added in revision 3, with a default.
	AllocatorEndpoint string `json:"allocatorEndpoint"`
}

// FleetRef names a fleet within a cluster.
type FleetRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// SnapshotEntry is one live fleet in a snapshot.
type SnapshotEntry struct {
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	Version   Version `json:"version"`
}

// Ref returns the entry's fleet reference.
func (s SnapshotEntry) Ref() FleetRef { return FleetRef{Namespace: s.Namespace, Name: s.Name} }

// Validate reports whether r names a valid namespace and fleet name.
func (r FleetRef) Validate() error {
	if err := validateDNSLabel(r.Namespace); err != nil {
		return fmt.Errorf("%w: namespace %q: %v", ErrInvalid, r.Namespace, err)
	}
	if err := validateDNSSubdomain(r.Name); err != nil {
		return fmt.Errorf("%w: name %q: %v", ErrInvalid, r.Name, err)
	}
	return nil
}

// IsZero reports whether r is the unbounded end of a range.
func (r FleetRef) IsZero() bool { return r == FleetRef{} }

// Compare orders references as their document IDs sort.
func (r FleetRef) Compare(o FleetRef) int {
	return cmp.Or(strings.Compare(r.Namespace, o.Namespace), strings.Compare(r.Name, o.Name))
}

// Key returns the key of r in cluster.
func (r FleetRef) Key(cluster string) Key {
	return Key{Cluster: cluster, Namespace: r.Namespace, Name: r.Name}
}

// Covers reports whether the part's range contains r.
func (s Snapshot) Covers(r FleetRef) bool {
	return (s.Start.IsZero() || s.Start.Compare(r) <= 0) && (s.End.IsZero() || r.Compare(s.End) < 0)
}

// IDHashes returns how many fleets the part lists and the sum of their
// documents' IDHash in cluster: what an aggregation over the part's range
// of live documents answers when the documents are the part's.
func (s Snapshot) IDHashes(cluster string) (count, sum int64) {
	for _, e := range s.Fleets {
		sum += IDHash(e.Ref().Key(cluster).DocID())
	}
	return int64(len(s.Fleets)), sum
}

// Lists reports whether r is among the part's live fleets.
func (s Snapshot) Lists(r FleetRef) bool {
	_, found := sortSearch(s.Fleets, r)
	return found
}

func sortSearch(entries []SnapshotEntry, r FleetRef) (int, bool) {
	lo, hi := 0, len(entries)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if entries[m].Ref().Compare(r) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(entries) && entries[lo].Ref() == r
}

// DecodeEvent parses and validates one message. Every error wraps
// ErrInvalid: retrying cannot fix the message. Unknown fields are ignored,
// so that an older reader accepts events of a newer, compatible schema.
func DecodeEvent(data []byte) (Event, error) {
	e, err := ParseEvent(data)
	if err != nil {
		return Event{}, err
	}
	if e.Kind == KindUpsert {
		if err := e.Fleet.Validate(); err != nil {
			return Event{}, err
		}
	}
	return e, nil
}

// ParseEvent is DecodeEvent but for an upsert's state, which it returns
// unchecked: the ingest side Admits it, reducing what a publisher did not
// fit (as Fit would have) instead of dropping the whole event.
func ParseEvent(data []byte) (Event, error) {
	if len(data) > MaxEventBytes {
		return Event{}, fmt.Errorf("%w: event of %d bytes exceeds %d", ErrInvalid, len(data), MaxEventBytes)
	}
	var e Event
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&e); err != nil {
		return Event{}, fmt.Errorf("%w: decode event: %s", ErrInvalid, describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Event{}, fmt.Errorf("%w: decode event: data after the JSON object", ErrInvalid)
	}
	if e.Kind == KindUpsert && len(data) > MaxUpsertBytes {
		return Event{}, fmt.Errorf("%w: fleet: upsert of %d bytes exceeds %d", ErrInvalid, len(data), MaxUpsertBytes)
	}
	if err := e.validateEnvelope(); err != nil {
		return Event{}, err
	}
	return e, nil
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %s: cannot use JSON %s as %s", te.Field, te.Value, te.Type)
	}
	return err.Error()
}

// EncodeEvent validates e and returns its JSON encoding, with every map
// present (Avro maps are never null).
func EncodeEvent(e Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	e.Fleet.Labels = nonNil(e.Fleet.Labels)
	e.Fleet.Annotations = nonNil(e.Fleet.Annotations)
	e.Fleet.GameServerLabels = nonNil(e.Fleet.GameServerLabels)
	e.Fleet.Status = e.Fleet.Status.nonNil()
	if e.Fleet.Rollout.Sets == nil {
		e.Fleet.Rollout.Sets = []GameServerSet{}
	}
	if e.Fleet.Autoscalers == nil {
		e.Fleet.Autoscalers = []Autoscaler{}
	}
	e.Snapshot.ClusterLabels = nonNil(e.Snapshot.ClusterLabels)
	e.Snapshot.Totals = e.Snapshot.Totals.nonNil()
	if e.Snapshot.Fleets == nil {
		e.Snapshot.Fleets = []SnapshotEntry{}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	if e.Kind == KindUpsert && len(b) > MaxUpsertBytes {
		return nil, fmt.Errorf("%w: fleet: upsert of %d bytes exceeds %d", ErrInvalid, len(b), MaxUpsertBytes)
	}
	if len(b) > MaxEventBytes {
		return nil, fmt.Errorf("%w: event of %d bytes exceeds %d", ErrInvalid, len(b), MaxEventBytes)
	}
	return b, nil
}

func (s Status) nonNil() Status {
	s.Counters = nonNil(s.Counters)
	s.Lists = nonNil(s.Lists)
	return s
}

func nonNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// Validate reports the first reason e cannot be ingested, naming the field.
func (e Event) Validate() error {
	if err := e.validateEnvelope(); err != nil {
		return err
	}
	if e.Kind == KindUpsert {
		return e.Fleet.Validate()
	}
	return nil
}

// validateEnvelope is Validate but for an upsert's state.
func (e Event) validateEnvelope() error {
	if e.SchemaVersion != SchemaVersion {
		return fmt.Errorf("%w: schemaVersion %d: unsupported, this reader understands %d", ErrInvalid, e.SchemaVersion, SchemaVersion)
	}
	switch e.Kind {
	case KindUpsert, KindDelete, KindSnapshot:
	default:
		return fmt.Errorf("%w: kind %q: must be %s, %s or %s", ErrInvalid, e.Kind, KindUpsert, KindDelete, KindSnapshot)
	}
	if err := ValidateClusterName(e.Cluster); err != nil {
		return err
	}
	if err := e.Version.Validate(); err != nil {
		return err
	}
	if e.ObservedAt <= 0 || e.ObservedAt > MaxMicros {
		return fmt.Errorf("%w: observedAt %d: must be a positive time in microseconds, at most %d (year 9999)", ErrInvalid, e.ObservedAt, MaxMicros)
	}
	if e.Publisher.ID == "" || len(e.Publisher.ID) > maxSubdomainLen || !printable(e.Publisher.ID) {
		return fmt.Errorf("%w: publisher.id %q: must be 1 to %d printable characters", ErrInvalid, e.Publisher.ID, maxSubdomainLen)
	}
	if len(e.Publisher.Version) > maxLabelLen || !printable(e.Publisher.Version) {
		return fmt.Errorf("%w: publisher.version: must be at most %d printable characters", ErrInvalid, maxLabelLen)
	}
	switch e.Kind {
	case KindUpsert:
		if err := e.Key().Validate(); err != nil {
			return err
		}
		if e.Fleet.UID == "" {
			return fmt.Errorf("%w: fleet.uid: must not be empty in an upsert", ErrInvalid)
		}
		return nil
	case KindDelete:
		return e.Key().Validate()
	default:
		return e.Snapshot.validate(e.Version)
	}
}

// MaxSnapshotParts bounds how many parts one snapshot may have.
const MaxSnapshotParts = 10_000

func (s Snapshot) validate(v Version) error {
	if s.Parts < 1 || s.Parts > MaxSnapshotParts {
		return fmt.Errorf("%w: snapshot.parts %d: must be 1 to %d", ErrInvalid, s.Parts, MaxSnapshotParts)
	}
	if s.Part < 0 || s.Part >= s.Parts {
		return fmt.Errorf("%w: snapshot.part %d: must be 0 to %d", ErrInvalid, s.Part, s.Parts-1)
	}
	for _, b := range []struct {
		field string
		ref   FleetRef
	}{{"snapshot.start", s.Start}, {"snapshot.end", s.End}} {
		if b.ref.IsZero() {
			continue
		}
		if err := b.ref.Validate(); err != nil {
			return fmt.Errorf("%s: %w", b.field, err)
		}
	}
	if !s.Start.IsZero() && !s.End.IsZero() && s.Start.Compare(s.End) >= 0 {
		return fmt.Errorf("%w: snapshot.end %v: must be after snapshot.start %v", ErrInvalid, s.End, s.Start)
	}
	if s.Parts == 1 && (!s.Start.IsZero() || !s.End.IsZero()) {
		return fmt.Errorf("%w: snapshot.start, snapshot.end: a snapshot of one part covers every key and has no bounds", ErrInvalid)
	}
	for i, f := range s.Fleets {
		field := fmt.Sprintf("snapshot.fleets[%d]", i)
		if err := f.Ref().Validate(); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if err := f.Version.Validate(); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if f.Version.Compare(v) >= 0 {
			return fmt.Errorf("%w: %s.version %v: must be older than the snapshot's version %v", ErrInvalid, field, f.Version, v)
		}
		if i > 0 && s.Fleets[i-1].Ref().Compare(f.Ref()) >= 0 {
			return fmt.Errorf("%w: %s: fleets must be sorted by namespace and name without duplicates", ErrInvalid, field)
		}
		if !s.Covers(f.Ref()) {
			return fmt.Errorf("%w: %s: %s/%s is outside the part's range", ErrInvalid, field, f.Namespace, f.Name)
		}
	}
	if s.FleetCount < int64(len(s.Fleets)) {
		return fmt.Errorf("%w: snapshot.fleetCount %d: less than the %d fleets of this part", ErrInvalid, s.FleetCount, len(s.Fleets))
	}
	if err := ValidateLabels("snapshot.clusterLabels", s.ClusterLabels); err != nil {
		return err
	}
	if err := ValidateEndpoint("snapshot.allocatorEndpoint", s.AllocatorEndpoint); err != nil {
		return err
	}
	return s.Totals.validate("snapshot.totals")
}

// DefaultSnapshotPartBytes is the size the publisher aims a snapshot part
// at: 10 000 fleets with names of up to 100 characters fit in one part, and
// every part stays far below Pub/Sub's 10 MB limit whatever the names.
const DefaultSnapshotPartBytes = 2 << 20

// snapshotEntryOverhead is the JSON around one entry's names and numbers.
var snapshotEntryOverhead = len(`{"namespace":"","name":"","version":{"term":,"seq":}},`)

// snapshotEntryBytes is the exact size of e in a snapshot's JSON: names are
// DNS-1123 and need no escaping.
func snapshotEntryBytes(e SnapshotEntry) int {
	return snapshotEntryOverhead + len(e.Namespace) + len(e.Name) +
		len(strconv.FormatInt(e.Version.Term, 10)) + len(strconv.FormatInt(e.Version.Seq, 10))
}

// SplitSnapshot cuts a cluster's live fleets, in any order, into snapshot
// parts of at most about maxBytes each. The parts' ranges are contiguous and
// together cover every possible key, so a fleet absent from all of them is
// absent from the cluster. The parts carry no cluster-wide fields; the caller
// sets them.
func SplitSnapshot(fleets []SnapshotEntry, maxBytes int) []Snapshot {
	sorted := make([]SnapshotEntry, len(fleets))
	copy(sorted, fleets)
	slices.SortFunc(sorted, func(a, b SnapshotEntry) int { return a.Ref().Compare(b.Ref()) })
	var parts []Snapshot
	cur := Snapshot{Fleets: []SnapshotEntry{}}
	size := 0
	for _, f := range sorted {
		n := snapshotEntryBytes(f)
		if size+n > maxBytes && len(cur.Fleets) > 0 {
			parts = append(parts, cur)
			cur = Snapshot{Start: f.Ref(), Fleets: []SnapshotEntry{}}
			size = 0
		}
		cur.Fleets = append(cur.Fleets, f)
		size += n
	}
	parts = append(parts, cur)
	for i := range parts {
		parts[i].Part, parts[i].Parts = i, len(parts)
		if i+1 < len(parts) {
			parts[i].End = parts[i+1].Start
		}
	}
	return parts
}
