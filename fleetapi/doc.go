// Package fleetapi is fleetcast's read model, independent of HTTP: the
// query parameters and their parsing, matching, ordering, pages and page
// tokens, the answer shapes of schemas/query_api.openapi.yaml, one error
// type, and the Service that answers over the view engine's snapshots
// (package fleetview). Its HTTP client is package fleetclient, so that a
// program wanting fleetapi.Fleet links no HTTP client or Google
// credentials.
//
// The view costs what changed, not what matched: the engine reads every
// live fleet and cluster once, then only the documents written since its
// previous read (firestoredb stamps every write with Firestore's commit
// time, tombstones included), and publishes each state of the view as an
// immutable snapshot. Every answer — filtering, ordering, pages, ETags,
// placements, metrics — is computed on one snapshot taken with an atomic
// load: no request waits for a sync or for another request.
//
// Every Watch of the Service follows the engine's bounded feed of changes:
// a watch of any filter, over any protocol, costs no read of its own.
package fleetapi
