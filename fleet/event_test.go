package fleet_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

func TestDecodeEventRejectsMalformedInput(t *testing.T) {
	valid, err := fleet.EncodeEvent(upsert(1, 1, 1))
	require.NoError(t, err)
	tests := []struct {
		name, data, want string
	}{
		{"not json", "hello", "decode event"},
		{"empty", "", "decode event"},
		{"json array", "[]", "decode event"},
		{"trailing data", string(valid) + "{}", "data after the JSON object"},
		{"missing everything", "{}", "schemaVersion"},
		{"wrong type", `{"schemaVersion":"1"}`, "field schemaVersion"},
		{"missing version", strings.Replace(string(valid), `"version":{"term":1,"seq":1}`, `"version":{}`, 1), "version.term"},
		{"missing uid", strings.Replace(string(valid), `"uid":"u1"`, `"uid":""`, 1), "fleet.uid"},
		{"zero observedAt", strings.Replace(string(valid), `"observedAt":`, `"observedAt":0,"x":`, 1), "observedAt"},
		{"oversize upsert", strings.Replace(string(valid), `"uid":"u1"`, `"uid":"u1","pad":"`+strings.Repeat("x", fleet.MaxUpsertBytes)+`"`, 1), "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fleet.DecodeEvent([]byte(tt.data))
			require.ErrorIs(t, err, fleet.ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestDecodeEventIgnoresUnknownFields(t *testing.T) {
	// A newer, compatible publisher adds fields with defaults; this reader
	// must still ingest its events.
	valid, err := fleet.EncodeEvent(upsert(1, 1, 1))
	require.NoError(t, err)
	newer := strings.Replace(string(valid), `"kind":`, `"addedLater":{"x":1},"kind":`, 1)
	ev, err := fleet.DecodeEvent([]byte(newer))
	require.NoError(t, err)
	assert.Equal(t, int64(1), ev.Fleet.Status.ReadyReplicas)
}

func TestEventLimits(t *testing.T) {
	big := upsert(1, 1, 1)
	big.Fleet.Labels = map[string]string{}
	for i := range fleet.MaxLabels + 1 {
		big.Fleet.Labels[fmt.Sprintf("l%d", i)] = "v"
	}
	_, err := fleet.EncodeEvent(big)
	assert.ErrorContains(t, err, "fleet.labels")

	counters := upsert(1, 1, 1)
	counters.Fleet.Status.Counters = map[string]fleet.Aggregate{}
	for i := range fleet.MaxAggregates + 1 {
		counters.Fleet.Status.Counters[fmt.Sprintf("c%d", i)] = fleet.Aggregate{}
	}
	_, err = fleet.EncodeEvent(counters)
	assert.ErrorContains(t, err, "fleet.status.counters")
}

// TestSnapshotOfTenThousandFleetsFitsOneMessage: the brief's sizing.
func TestSnapshotOfTenThousandFleetsFitsOneMessage(t *testing.T) {
	entries := make([]fleet.SnapshotEntry, 10_000)
	for i := range entries {
		entries[i] = fleet.SnapshotEntry{
			Namespace: fmt.Sprintf("team-%02d", i%40),
			Name:      fmt.Sprintf("battle-royale-v2-%05d", i),
			Version:   fleet.Version{Term: 1764484800000, Seq: int64(i)},
		}
	}
	parts := fleet.SplitSnapshot(entries, fleet.DefaultSnapshotPartBytes)
	require.Equal(t, 1, len(parts))
	b := encodeParts(t, parts)[0]
	assert.Less(t, len(b), 2<<20, "well under Pub/Sub's 10 MB")
	t.Logf("10 000 fleets: one part of %d bytes", len(b))
}

func TestSplitSnapshotBoundsEveryPart(t *testing.T) {
	// Longest possible names: the estimate must stay an upper bound.
	entries := make([]fleet.SnapshotEntry, 10_000)
	for i := range entries {
		entries[i] = fleet.SnapshotEntry{
			Namespace: strings.Repeat("n", 58) + fmt.Sprintf("%05d", i%100),
			Name:      strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 56) + fmt.Sprintf("%05d", i),
			Version:   fleet.Version{Term: 1<<62 + 1, Seq: 1<<62 + int64(i)},
		}
	}
	parts := fleet.SplitSnapshot(entries, fleet.DefaultSnapshotPartBytes)
	require.Greater(t, len(parts), 1)
	total := 0
	for i, b := range encodeParts(t, parts) {
		assert.LessOrEqual(t, len(b), fleet.DefaultSnapshotPartBytes+2<<10, "part %d: entries within the budget, plus the fixed fields", i)
		total += len(parts[i].Fleets)
	}
	assert.Equal(t, len(entries), total, "no fleet lost or repeated")
}

func TestSplitSnapshotOfNoFleetsCoversEverything(t *testing.T) {
	parts := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)
	require.Equal(t, 1, len(parts))
	assert.True(t, parts[0].Covers(fleet.FleetRef{Namespace: "any", Name: "fleet"}))
	assert.Empty(t, parts[0].Fleets)
}

func encodeParts(tb testing.TB, parts []fleet.Snapshot) [][]byte {
	tb.Helper()
	var out [][]byte
	for i, p := range parts {
		e := upsert(1<<62+2, 0, 0)
		e.Kind, e.Namespace, e.Name, e.Fleet = fleet.KindSnapshot, "", "", fleet.State{}
		e.Snapshot = p
		e.Snapshot.FleetCount = 10_000
		b, err := fleet.EncodeEvent(e)
		require.NoError(tb, err, "part %d", i)
		if i > 0 {
			assert.Equal(tb, parts[i-1].End, p.Start, "parts %d and %d must be contiguous", i-1, i)
		}
		out = append(out, b)
	}
	return out
}

func FuzzDecodeEvent(f *testing.F) {
	for _, e := range []fleet.Event{upsert(1, 1, 1), deleteEv(2, 3)} {
		b, err := fleet.EncodeEvent(e)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"schemaVersion":1,"kind":"CLUSTER_SNAPSHOT"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := fleet.DecodeEvent(data)
		if err != nil {
			require.ErrorIs(t, err, fleet.ErrInvalid, "every decode error is permanent")
			return
		}
		// Whatever decodes is valid, re-encodes, and decodes to the same.
		require.NoError(t, ev.Validate())
		if ev.Kind != fleet.KindSnapshot {
			require.NoError(t, ev.Key().Validate())
			assertFirestoreDocID(t, ev.Key().DocID())
		}
		b, err := fleet.EncodeEvent(ev)
		require.NoError(t, err)
		again, err := fleet.DecodeEvent(b)
		require.NoError(t, err)
		b2, err := fleet.EncodeEvent(again)
		require.NoError(t, err)
		require.Equal(t, string(b), string(b2))
	})
}
