// Package fleetwatch keeps a live, local view of fleetcast's fleets for a
// matchmaker, and picks the fleet a match goes to.
//
// # Sources
//
// Two sources feed the same View. Watch follows Firestore with two
// realtime listeners, one over the live fleets and one over the clusters'
// heartbeats, for programs with Firestore credentials. WatchAPI follows
// the query function's stream (fleetcast.v1.InformationService
// WatchFleets), which needs only an ID token for the function's URL and
// costs Firestore nothing per client: outside Google Cloud, or for many
// matchmakers, use it.
//
// Either returns once the view is consistent: every live fleet at one
// point in time. Then it applies the Added, Modified and Removed changes
// as they come, and Options.OnChange hears each.
//
// # Staleness
//
// A cluster whose publisher goes quiet turns stale even when none of its
// fleets changes: the view judges every cluster's heartbeat each second
// (with WatchAPI, as the stream says, and every cluster once the stream
// itself has been silent for Options.StaleAfter, since it can no longer
// vouch for them). OnChange hears ClusterStale and ClusterFresh; Fleets
// marks a stale cluster's fleets Stale, and Pick and Choose pass them
// over.
//
// # Picking
//
// Pick and Choose take a label selector (platform, game version) and a
// Policy: a Rank (ByReady, the default, ByPlayers, ByCounter, ByList, or
// any func(Fleet) int64) and, in order, the cluster labels to prefer
// before any cluster. Among the fleets of the most preferred clusters
// that have capacity, they draw at random, each fleet's chance
// proportional to its Rank: matchmaker replicas picking from their own
// views spread their matches over the fleets in proportion to what each
// can take, instead of all herding onto the fleet that ranks highest
// until it fills. The ranking is the query side's (fleetapi.Ranking, which
// Place answers with). Self-reported figures are clamped where they rank
// (ready never counts above the game servers a fleet runs, available
// never above capacity less count), so one cluster cannot win the picks
// by lying.
//
// # Errors
//
// Starting fails at once on what retrying cannot mend (permission denied,
// not found, invalid argument, unauthenticated, failed precondition: the
// error is returned), and with ErrStartTimeout and the last error seen
// when no initial view comes within Options.StartTimeout. Once started,
// a broken listener or stream is restarted with jittered backoff (100 ms
// doubling to 10 s, starting over only once it delivered something), each
// error reported to Options.OnError and logged (slog.Default() unless
// Options.Log), each recovery to Options.OnRecover; a restart diffs its
// full set against the view, and WatchAPI resumes from its last event.
// Cancelling the context ends the watch (View.Done, View.Err).
//
// examples/matchmaker is a whole matchmaker built on it.
package fleetwatch
