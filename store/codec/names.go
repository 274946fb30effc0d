package codec

// The buckets of the index's schema, and what their keys and values are.
// Schema 1 and 2 had the first nine (Schema2Buckets); later schemas added
// the rest. The change log's bucket is not part of the schema (store's
// changes.go).
var (
	BucketMeta     = []byte("meta")     // schema, counters, generation
	BucketUser     = []byte("user")     // GetMeta/PutMeta values
	BucketFiles    = []byte("files")    // IDKey(dirID) ‖ base → record
	BucketDirs     = []byte("dirs")     // directory key "/a/b/" → IDKey(dirID)
	BucketDirNames = []byte("dirnames") // IDKey(dirID) → directory key
	BucketDigest   = []byte("bydigest") // backend ‖ digest ‖ file key → DigestValue
	BucketInodes   = []byte("inodes")   // IDKey(dev) ‖ IDKey(ino) ‖ file key → ∅
	BucketGroups   = []byte("groups")   // backend ‖ digest → group summary (groups of ≥ 2 paths)
	BucketDups     = []byte("dups")     // DescKey(duplicate bytes, backend ‖ digest) → group summary (groups of ≥ 2 inodes)
	BucketVerified = []byte("verified") // VerifiedKey(Checked, file key) → uvarint(size) (schema 3)
	// BucketPending holds be64(run) ‖ digest key ‖ file key → pending
	// entry (schema 4; in runs since schema 6).
	BucketPending = []byte("pending")
	// BucketPendInodes holds the deferred inode entries: be64(run) ‖
	// IDKey(dev) ‖ IDKey(ino) ‖ file key → ∅ (schema 6).
	BucketPendInodes = []byte("pendinodes")
	BucketSurveys    = []byte("surveys") // the group's dups key → its survey (schema 7)
	// BucketShelf holds the records of file systems that are not where
	// they were (schema 7).
	BucketShelf = []byte("shelf")

	// Schema2Buckets are the buckets of schemas 1 and 2.
	Schema2Buckets = [][]byte{BucketMeta, BucketUser, BucketFiles, BucketDirs, BucketDirNames,
		BucketDigest, BucketInodes, BucketGroups, BucketDups}
	// AllBuckets are the buckets of the current schema.
	AllBuckets = append(Schema2Buckets[:len(Schema2Buckets):len(Schema2Buckets)],
		BucketVerified, BucketPending, BucketPendInodes, BucketSurveys, BucketShelf)
)

// Keys in the meta bucket.
var (
	MetaFormat     = []byte("format")
	MetaSchema     = []byte("schema")
	MetaCreated    = []byte("created")
	MetaCounters   = []byte("counters")
	MetaGeneration = []byte("generation")
)

// RunHeader is the length of the key prefix of a run bucket's entries
// (BucketPending, BucketPendInodes): be64(run).
const RunHeader = 8
