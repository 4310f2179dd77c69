package pkv

// SetStoreListPage sets how many entries a StoreLister asks pkv for at a time, and returns the
// previous page size: for tests of listings of several pages.
func SetStoreListPage(n int) int {
	old := storeListPage
	storeListPage = n
	return old
}
