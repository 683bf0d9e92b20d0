package soak

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// toxiproxy (v2.5.0) leaves a link's goroutines (its reader, each
		// toxic, its writer) blocked on the channels between them once the
		// connection at one end has closed: a send does not watch the
		// interrupt, and Proxy.Stop does not end them. Nothing outside
		// toxiproxy can stop them (seen in the soak test, 2026-12-03: the
		// toxic's Run, then the link's read).
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write"),
		// A change hung on such a link (hop replaced its proxy): the
		// interrupt of the link's toxic that never ends, the change
		// waiting for it, and the links waiting for its lock. The CI run
		// of 2026-12-03 found the interrupt (goroutines a removal starts
		// per link: chainRemoveToxic.func1, not chainRemoveToxic).
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).InterruptToxic"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection).chainAddToxic"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection).chainUpdateToxic"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection).chainRemoveToxic"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection).ResetToxics"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection).RemoveLink"),
	)
}
