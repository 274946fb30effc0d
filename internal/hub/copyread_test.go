package hub

import "testing"

// One asker holds copyReadsPerHost reads at most, and all of them
// copyReadsAtOnce: a host that floods the hub with reads holds back
// its own, not the others'.
func TestCopyReadSlots(t *testing.T) {
	r := newCopyReader(nil, nil, nil)
	for range copyReadsPerHost {
		if !r.take("laptop") {
			t.Fatal("a read of the laptop's refused below its share")
		}
	}
	if r.take("laptop") {
		t.Fatal("the laptop took more than its share")
	}
	hosts := []string{"desktop", "nas", "phone"}
	for i := copyReadsPerHost; i < copyReadsAtOnce; i++ {
		if h := hosts[i%len(hosts)]; !r.take(h) {
			t.Fatalf("read %d, of %s, refused below the node's bound", i+1, h)
		}
	}
	if r.take("media") {
		t.Fatal("a read beyond the node's bound taken")
	}
	r.release("laptop")
	if r.take("laptop") == false {
		t.Fatal("a slot released and not taken again")
	}
}
