package key

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"testing"

	"golang.org/x/crypto/blake2b"
)

// newHash returns the hash function of backend b, for tests only: the key
// package itself never hashes.
func newHash(t testing.TB, b Backend) hash.Hash {
	t.Helper()
	switch b.Base() {
	case SHA256:
		return sha256.New()
	case SHA512:
		return sha512.New()
	case SHA384:
		return sha512.New384()
	case SHA1:
		return sha1.New()
	case MD5:
		return md5.New()
	case BLAKE2B256:
		h, err := blake2b.New256(nil)
		if err != nil {
			t.Fatal(err)
		}
		return h
	case BLAKE2B512:
		h, err := blake2b.New512(nil)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	t.Fatalf("no hash for backend %v", b)
	return nil
}

// katContent holds the inputs of the known-answer vectors, by file name.
var katContent = map[string][]byte{
	"empty":      {},
	"abc.txt":    []byte("abc"),
	"fox.tar.gz": []byte("The quick brown fox jumps over the lazy dog"),
	"million.A":  bytes.Repeat([]byte("a"), 1000000),
}

// katVectors are the keys `git annex calckey --backend B FILE` (git-annex
// 10.20230126) printed for the files of katContent.
var katVectors = []struct {
	backend Backend
	file    string
	want    string
}{
	{SHA256E, "empty", "SHA256E-s0--e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	{SHA256E, "abc.txt", "SHA256E-s3--ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.txt"},
	{SHA256E, "fox.tar.gz", "SHA256E-s43--d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592.tar.gz"},
	{SHA256E, "million.A", "SHA256E-s1000000--cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0.A"},
	{SHA256, "empty", "SHA256-s0--e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	{SHA256, "abc.txt", "SHA256-s3--ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	{SHA256, "fox.tar.gz", "SHA256-s43--d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592"},
	{SHA256, "million.A", "SHA256-s1000000--cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
	{SHA512E, "empty", "SHA512E-s0--cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e"},
	{SHA512E, "abc.txt", "SHA512E-s3--ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f.txt"},
	{SHA512E, "fox.tar.gz", "SHA512E-s43--07e547d9586f6a73f73fbac0435ed76951218fb7d0c8d788a309d785436bbb642e93a252a954f23912547d1e8a3b5ed6e1bfd7097821233fa0538f3db854fee6.tar.gz"},
	{SHA512E, "million.A", "SHA512E-s1000000--e718483d0ce769644e2e42c7bc15b4638e1f98b13b2044285632a803afa973ebde0ff244877ea60a4cb0432ce577c31beb009c5c2c49aa2e4eadb217ad8cc09b.A"},
	{SHA512, "empty", "SHA512-s0--cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e"},
	{SHA512, "abc.txt", "SHA512-s3--ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"},
	{SHA512, "fox.tar.gz", "SHA512-s43--07e547d9586f6a73f73fbac0435ed76951218fb7d0c8d788a309d785436bbb642e93a252a954f23912547d1e8a3b5ed6e1bfd7097821233fa0538f3db854fee6"},
	{SHA512, "million.A", "SHA512-s1000000--e718483d0ce769644e2e42c7bc15b4638e1f98b13b2044285632a803afa973ebde0ff244877ea60a4cb0432ce577c31beb009c5c2c49aa2e4eadb217ad8cc09b"},
	{SHA384E, "empty", "SHA384E-s0--38b060a751ac96384cd9327eb1b1e36a21fdb71114be07434c0cc7bf63f6e1da274edebfe76f65fbd51ad2f14898b95b"},
	{SHA384E, "abc.txt", "SHA384E-s3--cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7.txt"},
	{SHA384E, "fox.tar.gz", "SHA384E-s43--ca737f1014a48f4c0b6dd43cb177b0afd9e5169367544c494011e3317dbf9a509cb1e5dc1e85a941bbee3d7f2afbc9b1.tar.gz"},
	{SHA384E, "million.A", "SHA384E-s1000000--9d0e1809716474cb086e834e310a4a1ced149e9c00f248527972cec5704c2a5b07b8b3dc38ecc4ebae97ddd87f3d8985.A"},
	{SHA384, "empty", "SHA384-s0--38b060a751ac96384cd9327eb1b1e36a21fdb71114be07434c0cc7bf63f6e1da274edebfe76f65fbd51ad2f14898b95b"},
	{SHA384, "abc.txt", "SHA384-s3--cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7"},
	{SHA384, "fox.tar.gz", "SHA384-s43--ca737f1014a48f4c0b6dd43cb177b0afd9e5169367544c494011e3317dbf9a509cb1e5dc1e85a941bbee3d7f2afbc9b1"},
	{SHA384, "million.A", "SHA384-s1000000--9d0e1809716474cb086e834e310a4a1ced149e9c00f248527972cec5704c2a5b07b8b3dc38ecc4ebae97ddd87f3d8985"},
	{BLAKE2B256E, "empty", "BLAKE2B256E-s0--0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"},
	{BLAKE2B256E, "abc.txt", "BLAKE2B256E-s3--bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319.txt"},
	{BLAKE2B256E, "fox.tar.gz", "BLAKE2B256E-s43--01718cec35cd3d796dd00020e0bfecb473ad23457d063b75eff29c0ffa2e58a9.tar.gz"},
	{BLAKE2B256E, "million.A", "BLAKE2B256E-s1000000--0741850f36cba4259628355d1073e24ddb9ca0e1bfac36fd39ae5dc2101e23a4.A"},
	{BLAKE2B256, "empty", "BLAKE2B256-s0--0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"},
	{BLAKE2B256, "abc.txt", "BLAKE2B256-s3--bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319"},
	{BLAKE2B256, "fox.tar.gz", "BLAKE2B256-s43--01718cec35cd3d796dd00020e0bfecb473ad23457d063b75eff29c0ffa2e58a9"},
	{BLAKE2B256, "million.A", "BLAKE2B256-s1000000--0741850f36cba4259628355d1073e24ddb9ca0e1bfac36fd39ae5dc2101e23a4"},
	{BLAKE2B512E, "empty", "BLAKE2B512E-s0--786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419d25e1031afee585313896444934eb04b903a685b1448b755d56f701afe9be2ce"},
	{BLAKE2B512E, "abc.txt", "BLAKE2B512E-s3--ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923.txt"},
	{BLAKE2B512E, "fox.tar.gz", "BLAKE2B512E-s43--a8add4bdddfd93e4877d2746e62817b116364a1fa7bc148d95090bc7333b3673f82401cf7aa2e4cb1ecd90296e3f14cb5413f8ed77be73045b13914cdcd6a918.tar.gz"},
	{BLAKE2B512E, "million.A", "BLAKE2B512E-s1000000--98fb3efb7206fd19ebf69b6f312cf7b64e3b94dbe1a17107913975a793f177e1d077609d7fba363cbba00d05f7aa4e4fa8715d6428104c0a75643b0ff3fd3eaf.A"},
	{BLAKE2B512, "empty", "BLAKE2B512-s0--786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419d25e1031afee585313896444934eb04b903a685b1448b755d56f701afe9be2ce"},
	{BLAKE2B512, "abc.txt", "BLAKE2B512-s3--ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923"},
	{BLAKE2B512, "fox.tar.gz", "BLAKE2B512-s43--a8add4bdddfd93e4877d2746e62817b116364a1fa7bc148d95090bc7333b3673f82401cf7aa2e4cb1ecd90296e3f14cb5413f8ed77be73045b13914cdcd6a918"},
	{BLAKE2B512, "million.A", "BLAKE2B512-s1000000--98fb3efb7206fd19ebf69b6f312cf7b64e3b94dbe1a17107913975a793f177e1d077609d7fba363cbba00d05f7aa4e4fa8715d6428104c0a75643b0ff3fd3eaf"},
	{SHA1E, "empty", "SHA1E-s0--da39a3ee5e6b4b0d3255bfef95601890afd80709"},
	{SHA1E, "abc.txt", "SHA1E-s3--a9993e364706816aba3e25717850c26c9cd0d89d.txt"},
	{SHA1E, "fox.tar.gz", "SHA1E-s43--2fd4e1c67a2d28fced849ee1bb76e7391b93eb12.tar.gz"},
	{SHA1E, "million.A", "SHA1E-s1000000--34aa973cd4c4daa4f61eeb2bdbad27316534016f.A"},
	{SHA1, "empty", "SHA1-s0--da39a3ee5e6b4b0d3255bfef95601890afd80709"},
	{SHA1, "abc.txt", "SHA1-s3--a9993e364706816aba3e25717850c26c9cd0d89d"},
	{SHA1, "fox.tar.gz", "SHA1-s43--2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"},
	{SHA1, "million.A", "SHA1-s1000000--34aa973cd4c4daa4f61eeb2bdbad27316534016f"},
	{MD5E, "empty", "MD5E-s0--d41d8cd98f00b204e9800998ecf8427e"},
	{MD5E, "abc.txt", "MD5E-s3--900150983cd24fb0d6963f7d28e17f72.txt"},
	{MD5E, "fox.tar.gz", "MD5E-s43--9e107d9d372bb6826bd81d3542a419d6.tar.gz"},
	{MD5E, "million.A", "MD5E-s1000000--7707d6ae4e027c70eea2a935c2296f21.A"},
	{MD5, "empty", "MD5-s0--d41d8cd98f00b204e9800998ecf8427e"},
	{MD5, "abc.txt", "MD5-s3--900150983cd24fb0d6963f7d28e17f72"},
	{MD5, "fox.tar.gz", "MD5-s43--9e107d9d372bb6826bd81d3542a419d6"},
	{MD5, "million.A", "MD5-s1000000--7707d6ae4e027c70eea2a935c2296f21"},
}

func TestKnownAnswers(t *testing.T) {
	seen := map[Backend]int{}
	for _, v := range katVectors {
		data, ok := katContent[v.file]
		if !ok {
			t.Fatalf("vector for unknown file %q", v.file)
		}
		h := newHash(t, v.backend)
		h.Write(data)
		k, err := FromDigest(v.backend, h.Sum(nil), int64(len(data)), "some/dir/"+v.file, DefaultExtRule)
		if err != nil {
			t.Fatalf("%v %s: %v", v.backend, v.file, err)
		}
		if got := k.String(); got != v.want {
			t.Errorf("%v %s:\n got %s\nwant %s", v.backend, v.file, got, v.want)
		}
		p, err := Parse(v.want)
		if err != nil || p != k {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", v.want, p, err, k)
		}
		seen[v.backend]++
	}
	for _, b := range Backends() {
		if seen[b] != len(katContent) {
			t.Errorf("backend %v has %d known-answer vectors, want %d", b, seen[b], len(katContent))
		}
	}
}
