// Package verify is the scenario behind idem verify: it breaks a whole
// exactly-once flow on purpose and checks the result from the databases
// themselves: every effect applied once, none lost, none doubled.
//
// Flow runs clients → HTTP (idemhttp) → order service and outbox in one
// transaction → relay (outbox.Relay) → broker → consumers (inbox) → ledger, then
// the payment API (effect) and the push to browsers (stream). It puts the fault
// injectors of package chaos at every boundary and reports one Row per boundary.
//
// It imports half of idem, which is why it is not part of chaos: a test that
// needs only an injector or a Clock must not link it.
package verify
