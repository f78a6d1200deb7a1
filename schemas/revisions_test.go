package schemas_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/schemas"
)

// records maps the full name of every record an Avro schema defines to its
// fields, with inline record, enum and fixed definitions replaced by their
// names, so that a record compares equal across revisions when only a
// record nested in it grew.
func records(tb testing.TB, def []byte) map[string][]map[string]any {
	tb.Helper()
	var root any
	require.NoError(tb, json.Unmarshal(def, &root))
	out := map[string][]map[string]any{}
	var ref func(ns string, t any) any
	ref = func(ns string, t any) any {
		m, ok := t.(map[string]any)
		if !ok {
			return t
		}
		switch m["type"] {
		case "record", "enum", "fixed":
			name := m["name"].(string)
			if n, ok := m["namespace"].(string); ok {
				ns = n
			}
			full := ns + "." + name
			if m["type"] == "record" {
				var fields []map[string]any
				for _, f := range m["fields"].([]any) {
					f := f.(map[string]any)
					norm := map[string]any{"name": f["name"], "type": ref(ns, f["type"])}
					if d, ok := f["default"]; ok {
						norm["default"] = d
					}
					fields = append(fields, norm)
				}
				out[full] = fields
			}
			return full
		case "array":
			return map[string]any{"array": ref(ns, m["items"])}
		case "map":
			return map[string]any{"map": ref(ns, m["values"])}
		}
		return t
	}
	ref("", root)
	return out
}

// TestSchemaRevisionsOnlyAddFieldsWithDefaults is the evolution rule that
// lets every publisher release publish to a topic holding every revision,
// and every reader decode every revision's events: a revision keeps each
// field of the one before it, with the same type, and adds only fields
// with defaults.
func TestSchemaRevisionsOnlyAddFieldsWithDefaults(t *testing.T) {
	revs, err := schemas.FleetEventRevisions()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(revs), 2)
	for i, def := range revs {
		_, err := goavro.NewCodec(string(def))
		require.NoError(t, err, "revision %d must be a valid Avro schema, defaults included", i+1)
		if i == 0 {
			continue
		}
		older, newer := records(t, revs[i-1]), records(t, def)
		for name, oldFields := range older {
			newFields, ok := newer[name]
			if !assert.True(t, ok, "revision %d drops record %s", i+1, name) {
				continue
			}
			byName := map[string]map[string]any{}
			for _, f := range newFields {
				byName[f["name"].(string)] = f
			}
			for j, f := range oldFields {
				nf := byName[f["name"].(string)]
				if assert.NotNil(t, nf, "revision %d drops %s.%s", i+1, name, f["name"]) {
					assert.Equal(t, f["type"], nf["type"], "revision %d changes the type of %s.%s", i+1, name, f["name"])
					assert.Equal(t, f["name"], newFields[j]["name"], "revision %d reorders %s's fields", i+1, name)
				}
				delete(byName, f["name"].(string))
			}
			for added, f := range byName {
				_, ok := f["default"]
				assert.True(t, ok, "revision %d adds %s.%s without a default", i+1, name, added)
			}
		}
	}
}

func TestTheNewestRevisionIsTheSchema(t *testing.T) {
	revs, err := schemas.FleetEventRevisions()
	require.NoError(t, err)
	assert.Equal(t, string(schemas.FleetEventAvro), string(revs[len(revs)-1]))
	for i, def := range revs[:len(revs)-1] {
		assert.NotEqual(t, string(schemas.FleetEventAvro), string(def), "revision %d repeats the newest", i+1)
	}
}

// TestOlderPublishersEventsStillIngest: the events of revision 1 (frozen
// as a release's publisher wrote them) validate against revision 1, decode
// with this reader, and make documents whose new fields are absent.
// (goavro fills in defaults where Pub/Sub's JSON decoding rejects a
// missing field: emulator-tests' TestSchemaRevisions shows the topic's.)
func TestOlderPublishersEventsStillIngest(t *testing.T) {
	revs, err := schemas.FleetEventRevisions()
	require.NoError(t, err)
	first, err := goavro.NewCodec(string(revs[0]))
	require.NoError(t, err)
	files, err := filepath.Glob("testdata/revision1/event-*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data := readFile(t, f)
			_, _, err := first.NativeFromTextual(data)
			require.NoError(t, err, "a revision 1 event")
			ev, err := fleet.DecodeEvent(data)
			require.NoError(t, err)
			assert.False(t, ev.Fleet.Rollout.Known())
			assert.Empty(t, ev.Fleet.Autoscalers)
			if ev.Kind == fleet.KindUpsert {
				doc, outcome := fleet.ApplyFleetEvent(nil, ev, time.Now(), fleet.DefaultTombstoneRetention)
				require.Equal(t, fleet.OutcomeCreated, outcome)
				assert.Nil(t, doc.Rollout, "an unknown rollout is absent, not incomplete")
				assert.Nil(t, doc.Autoscalers)
			}
		})
	}
}

// TestNewerFieldsAreIgnored: a reader decodes an event of a later revision,
// one with fields it does not know at every level, as if they were absent,
// so that an ingest function may be upgraded after the publishers.
func TestNewerFieldsAreIgnored(t *testing.T) {
	data := readFile(t, "testdata/valid/event-upsert.json")
	want, err := fleet.DecodeEvent(data)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	raw["futureTopLevel"] = map[string]any{"x": 1}
	fl := raw["fleet"].(map[string]any)
	fl["futureState"] = []any{"a"}
	fl["status"].(map[string]any)["futureStatus"] = 7
	fl["rollout"].(map[string]any)["futureRollout"] = true
	fl["rollout"].(map[string]any)["sets"].([]any)[0].(map[string]any)["futureSet"] = "s"
	fl["autoscalers"].([]any)[0].(map[string]any)["policy"].(map[string]any)["futurePolicy"] = 1.5
	later, err := json.Marshal(raw)
	require.NoError(t, err)
	got, err := fleet.DecodeEvent(later)
	require.NoError(t, err, fmt.Sprintf("%s", later))
	assert.Equal(t, want, got)
}
