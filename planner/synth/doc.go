// Package synth builds reproducible synthetic tree snapshots for the
// owner-lane planner: the workload of `kvsim plan-bench` and of the planner's
// benchmarks.
//
// # Shape
//
// A snapshot looks like the device-resident part of a busy server's radix
// tree. Under the root sit shared system prompts (chains of one to three
// long nodes, 16 to 128 pages each). Conversations hang under a prompt
// chosen with a skewed popularity; each conversation is a chain of turns (2
// to 24 pages each) and later requests fork it at an earlier turn, so
// internal nodes have one or several children. Exactly Config.Candidates
// leaves are eligible at the start. On top of those, about 3% as many
// running requests lock a leaf and its whole path to the root (as SGLang's
// lock_ref does), and about 5% as many host-only leaves (evicted earlier)
// hang under a prompt or a conversation turn without being
// device-resident.
//
// Pages are assigned to owner lanes in two ways, mixed half and half per
// node: striped round-robin by page position (decode context parallelism,
// page p on lane p mod cp), or all on one owner lane of the conversation.
// So lane counts are non-uniform. Shared prompts are always striped.
//
// SLRU keys follow SGLang: a node's last access is at least that of any
// descendant (matching a prefix touches the whole path), and nodes shared by
// several requests are in the protected segment (hit count >= 2), as are 20%
// of leaves.
//
// The total deficit is spread over the lanes with random weights between
// 0.25 and 1.75, one lane's weight tripled, and the rounding remainder given
// to the lowest lanes, so the deficits sum exactly to Config.Deficit.
//
// Everything is drawn from one PCG stream seeded by Config.Seed, so a
// (Config) always yields the same snapshot.
package synth
