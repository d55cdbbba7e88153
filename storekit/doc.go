// Package storekit is the kit of a backend author: what every idem.Store
// implementation does the same way, so that the five in this module (idemmem,
// idemredis, idempg, idemsqlite, idemmysql) and a sixth of yours agree to the
// letter. The Check functions are the prologues of the Store methods (validate
// the input, then whether the context has ended); Existing turns a stored record
// into the Result a duplicate claim gets; KeyOrder and FillRepeats order a batch
// so that concurrent batches lock their keys in one order and a key repeated in
// one batch is answered once; RunSweeper runs a Sweeper's retention loop.
//
// idemtest.StoreSuite checks the whole contract; a backend that calls these
// functions gets the error shapes it asserts for free.
package storekit
