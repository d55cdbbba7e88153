// Package idemtest holds the conformance suites that every idem backend runs, so the
// memory, SQLite, PostgreSQL and Redis stores are held to one contract.
//
// A backend's test calls StoreSuite with a Harness that makes a fresh, isolated store
// per subtest, and SQL backends also call TxStoreSuite with their transaction type:
//
//	func TestConformance(t *testing.T) {
//		idemtest.StoreSuite(t, idemtest.Harness{
//			New: func(t *testing.T) idem.Store { return newTestStore(t) },
//		})
//	}
//
// The suites use real goroutines and short real leases (a few hundred milliseconds);
// they wait for expiry by polling, never by asserting how long something took.
//
// StoreSuite also tests idem.Renewer (skipped for a store without it) and runs
// CheckLinearizability: a random concurrent history of Claim, Complete, Release and
// Renew calls (32 clients, 5,120 calls in 10 rounds over keys that each live two
// rounds, clients sharing live tokens so that two calls with one token meet) checked
// by the porcupine model checker against a sequential model of the contract, with
// per-key tokens required to rise strictly; a failure lists the calls on one key
// that have no legal order. TxStoreSuite checks
// that tokens rise across transactions that release and claim a key again while
// other transactions wait on them.
//
// InspectorSuite holds every store to idem.Inspector: Inspect of live, completed and
// expired records, List pagination (every key of a scope once, across scopes that
// are prefixes of each other or hold glob and LIKE metacharacters, garbage cursors
// refused), and Evict, including a forced one racing the holder's Complete; and, on
// a store that also implements idem.ScopeLister, Scopes pagination (each scope once,
// Redis at least once, the same prefixes and metacharacters, bad limits and garbage
// cursors refused).
//
// SkewSuite is for a store that takes its callers' clock (idemsqlite): two handles
// on one database whose clocks disagree by D, driven by a SkewClock that never reads
// the wall clock, show that the one ahead takes a lease over, and forgets or sweeps
// a record, exactly D early and no earlier, and that the fenced holder's late
// Complete fails with idem.ErrLeaseLost.
package idemtest
