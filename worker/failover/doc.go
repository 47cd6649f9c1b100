// Package failover is what a worker does so that its instances outlive
// it: it keeps at the master what an instance placed again on another
// worker needs, and brings that back when an instance is placed here
// again (docs/architecture.md, "Failover: what a re-placed instance gets
// back").
//
//   - Shared state (Replica): every write of an instance's shared state
//     (app API set and append, instance grants, its name) is stored at
//     the master, under the instance's placement epoch, before it is
//     acknowledged; a re-placed instance starts from what is stored.
//   - Browser snapshots (Snapshots): each virtual browser's page is saved
//     at the master (its URL, viewport, cookies, the storage of the
//     page's origin and what its form fields show: values, focus, caret,
//     scroll), so the instance placed again elsewhere gets its browsers
//     back with the same id, owner, name and grants (RestorePage,
//     RestoreAll). A migration snapshots them from live state with their
//     input held (HoldAndSave), so the snapshot has everything the pages
//     took, and gives the input back if the move fails (Resume).
//
// The package never sees the worker: a virtual browser is a Subject,
// which keeps its bookkeeping in a BrowserState, and both stores are the
// master's InstanceState object (contract.InstanceStateClient).
package failover
