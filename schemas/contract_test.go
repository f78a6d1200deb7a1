package schemas_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/schemas"
)

func avroCodec(tb testing.TB) *goavro.Codec {
	tb.Helper()
	codec, err := goavro.NewCodec(string(schemas.FleetEventAvro))
	require.NoError(tb, err, "fleet_event.avsc must be a valid Avro schema")
	return codec
}

// documentSchema compiles one definition of fleet_document.schema.json.
func documentSchema(tb testing.TB, def string) *jsonschema.Schema {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.FleetDocumentJSONSchema))
	require.NoError(tb, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(tb, c.AddResource("fleet_document.schema.json", doc))
	s, err := c.Compile("fleet_document.schema.json#/$defs/" + def)
	require.NoError(tb, err)
	return s
}

func validateDocument(tb testing.TB, s *jsonschema.Schema, data []byte) error {
	tb.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	require.NoError(tb, err)
	return s.Validate(inst)
}

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	require.NoError(tb, err)
	return b
}

func indent(tb testing.TB, b []byte) []byte {
	tb.Helper()
	var out bytes.Buffer
	require.NoError(tb, json.Indent(&out, b, "", "  "))
	out.WriteByte('\n')
	return out.Bytes()
}

// sampleEvents are events as the publisher builds them, including ones with
// nil maps and an empty cluster, all of which must encode to valid Avro JSON.
func sampleEvents() []fleet.Event {
	base := fleet.Event{
		SchemaVersion: fleet.SchemaVersion,
		Cluster:       "console-us",
		Version:       fleet.Version{Term: 7, Seq: 3},
		ObservedAt:    fleet.MicrosOf(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)),
		Publisher:     fleet.Publisher{ID: "pub-0"},
		Namespace:     "games",
		Name:          "br.v2",
	}
	upsert := base
	upsert.Kind = fleet.KindUpsert
	upsert.Fleet = fleet.State{
		UID:    "u-1",
		Labels: map[string]string{"app.kubernetes.io/version": "2", "agones.dev/sdk-version": "1.61.0"},
		Spec:   fleet.Spec{Replicas: 3, Scheduling: "Distributed"},
		Status: fleet.Status{Replicas: 3, ReadyReplicas: 3, Counters: map[string]fleet.Aggregate{"rooms": {Count: 1, Capacity: 5}}},
	}
	bare := base
	bare.Kind = fleet.KindUpsert
	bare.Fleet.UID = "u-2"
	del := base
	del.Kind = fleet.KindDelete
	var snaps []fleet.Event
	entries := []fleet.SnapshotEntry{
		{Namespace: "games", Name: "b", Version: fleet.Version{Term: 7, Seq: 1}},
		{Namespace: "games", Name: "a", Version: fleet.Version{Term: 6, Seq: 99}},
		{Namespace: "a", Name: "z", Version: fleet.Version{Term: 7, Seq: 2}},
	}
	for _, maxBytes := range []int{fleet.DefaultSnapshotPartBytes, 1} {
		for _, p := range fleet.SplitSnapshot(entries, maxBytes) {
			s := base
			s.Kind, s.Namespace, s.Name = fleet.KindSnapshot, "", ""
			s.Snapshot = p
			s.Snapshot.FleetCount = int64(len(entries))
			snaps = append(snaps, s)
		}
	}
	empty := base
	empty.Kind, empty.Namespace, empty.Name = fleet.KindSnapshot, "", ""
	empty.Snapshot = fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
	return append([]fleet.Event{upsert, bare, del, empty}, snaps...)
}

func TestEncodedEventsValidateAgainstAvroSchema(t *testing.T) {
	codec := avroCodec(t)
	for i, ev := range sampleEvents() {
		b, err := fleet.EncodeEvent(ev)
		require.NoError(t, err, "event %d", i)
		native, _, err := codec.NativeFromTextual(b)
		require.NoError(t, err, "event %d (%s) must validate against fleet_event.avsc: %s", i, ev.Kind, b)
		// And the Avro view of it is the same document.
		text, err := codec.TextualFromNative(nil, native)
		require.NoError(t, err)
		assert.JSONEq(t, string(b), string(text), "event %d", i)
	}
}

func TestAvroSchemaHasNoUnions(t *testing.T) {
	var schema any
	require.NoError(t, json.Unmarshal(schemas.FleetEventAvro, &schema))
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case []any:
			t.Errorf("%s: a union; the JSON encoding would wrap its values, keep the schema union-free", path)
		case map[string]any:
			for k, c := range v {
				if k == "type" || k == "items" || k == "values" || k == "fields" {
					if fields, ok := c.([]any); ok && k == "fields" {
						for _, f := range fields {
							fm := f.(map[string]any)
							walk(path+"."+fm["name"].(string), fm["type"])
						}
						continue
					}
					walk(path+"."+k, c)
				}
			}
		}
	}
	walk("FleetEvent", schema)
}

func TestValidEventsRoundTripExactly(t *testing.T) {
	codec := avroCodec(t)
	files, err := filepath.Glob("testdata/valid/event-*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data := readFile(t, f)
			_, _, err := codec.NativeFromTextual(data)
			require.NoError(t, err, "golden event must validate against the Avro schema")
			ev, err := fleet.DecodeEvent(data)
			require.NoError(t, err)
			out, err := fleet.EncodeEvent(ev)
			require.NoError(t, err)
			assert.Equal(t, string(data), string(indent(t, out)))
		})
	}
}

func TestInvalidEventsAreRejectedNamingTheField(t *testing.T) {
	want := map[string]string{
		"event-cluster-uppercase.json":            "cluster",
		"event-counter-reserved-key.json":         "fleet.status.counters",
		"event-fleet-name-invalid.json":           "name",
		"event-future-schema-version.json":        "schemaVersion",
		"event-label-value-too-long.json":         "fleet.labels",
		"event-negative-seq.json":                 "version.seq",
		"event-ready-replicas-string.json":        "fleet.status.readyReplicas",
		"event-snapshot-entry-not-older.json":     "snapshot.fleets[0].version",
		"event-snapshot-entry-outside-range.json": "snapshot.fleets[2]",
		"event-snapshot-unsorted.json":            "snapshot.fleets[1]",
		"event-unknown-kind.json":                 "kind",
	}
	files, err := filepath.Glob("testdata/invalid/event-*.json")
	require.NoError(t, err)
	require.Len(t, files, len(want), "every invalid event needs an expected field here")
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			field, ok := want[name]
			require.True(t, ok, "no expected field for %s", name)
			_, err := fleet.DecodeEvent(readFile(t, f))
			require.ErrorIs(t, err, fleet.ErrInvalid)
			assert.Contains(t, err.Error(), field)
		})
	}
}

func TestValidDocumentsRoundTripExactly(t *testing.T) {
	fleetSchema, clusterSchema := documentSchema(t, "fleet"), documentSchema(t, "cluster")
	files, err := filepath.Glob("testdata/valid/*.json")
	require.NoError(t, err)
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasPrefix(name, "event-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			data := readFile(t, f)
			var out []byte
			if strings.HasPrefix(name, "cluster") {
				require.NoError(t, validateDocument(t, clusterSchema, data))
				var d fleet.ClusterDocument
				require.NoError(t, json.Unmarshal(data, &d))
				out, err = json.Marshal(d)
			} else {
				require.NoError(t, validateDocument(t, fleetSchema, data))
				var d fleet.Document
				require.NoError(t, json.Unmarshal(data, &d))
				out, err = json.Marshal(d)
			}
			require.NoError(t, err)
			assert.Equal(t, string(data), string(indent(t, out)))
		})
	}
}

// TestProducedDocumentsValidate ties the ingest decisions to the document
// schema: whatever the function would write validates.
func TestProducedDocumentsValidate(t *testing.T) {
	fleetSchema, clusterSchema := documentSchema(t, "fleet"), documentSchema(t, "cluster")
	now := time.Date(2026, 11, 30, 6, 0, 1, 0, time.UTC)
	for i, ev := range sampleEvents() {
		var doc any
		switch ev.Kind {
		case fleet.KindSnapshot:
			doc = fleet.ApplySnapshotToCluster(nil, ev, now)
			b, err := json.Marshal(doc)
			require.NoError(t, err)
			assert.NoError(t, validateDocument(t, clusterSchema, b), "event %d: %s", i, b)
			continue
		default:
			doc, _ = fleet.ApplyFleetEvent(nil, ev, now, fleet.DefaultTombstoneRetention)
		}
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		assert.NoError(t, validateDocument(t, fleetSchema, b), "event %d: %s", i, b)
	}
}

func TestInvalidDocumentsAreRejectedNamingTheField(t *testing.T) {
	want := map[string]string{
		"cluster-name-invalid.json":          "/cluster",
		"cluster-zero-term.json":             "/snapshotVersion/term",
		"fleet-available-missing.json":       "/status/counters/rooms",
		"fleet-label-key-invalid.json":       "'bad key!'", // the library misreports where propertyNames errors are
		"fleet-missing-version.json":         "version",
		"fleet-negative-ready-replicas.json": "/status/readyReplicas",
		"fleet-tombstone-with-status.json":   "/status",
	}
	files, err := filepath.Glob("testdata/invalid/*.json")
	require.NoError(t, err)
	schemaFor := map[string]*jsonschema.Schema{"fleet": documentSchema(t, "fleet"), "cluster": documentSchema(t, "cluster")}
	n := 0
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasPrefix(name, "event-") {
			continue
		}
		n++
		t.Run(name, func(t *testing.T) {
			field, ok := want[name]
			require.True(t, ok, "no expected field for %s", name)
			err := validateDocument(t, schemaFor[strings.SplitN(name, "-", 2)[0]], readFile(t, f))
			require.Error(t, err)
			assert.Contains(t, err.Error(), field)
		})
	}
	assert.Equal(t, len(want), n)
}
