# Included by ``_protokernel.pyx`` (where its section "maps: the last entry of a key wins"
# stood): a map whose key comes again in one message keeps one entry, with the last value, where
# the key first stood (Protobuf's rule): ``_last_key_wins``, called by ``_message`` when a map
# field's message ends, finds the map's entries and key and hands them to
# ``_keep_last_entries`` (``../_map_keys.pxi``, shared with the Avro kernel, included before).
# The kernel defines the ``Err`` codes and the ``Machine`` struct before the include.

cdef int _last_key_wins(Machine* m, const int32_t* f) noexcept nogil:
    """The map field ``f`` of the message ending: of the entries it just appended that share a
    key, one is kept, holding the last entry's value where the first stood (the Protobuf spec:
    "the last key seen is used"; protobuf-java's LinkedHashMap keeps the first one's place, upb
    orders a map by its hash table). The entries are the last rows of the entry struct column
    and of every column under it (a message value's fields, lists and maps)."""
    cdef Col* lc = m.cols + f[2]
    cdef int32_t sc = f[3]
    cdef const int32_t* emsg = m.msgs + MSG_WORDS * f[5]
    cdef const int32_t* kf
    cdef Col* k
    cdef int64_t s = lc.offs[lc.n], n = m.cols[sc].n - lc.offs[lc.n]
    if n < 2 or emsg[2] < 1:
        return E_OK
    kf = m.fields + FIELD_WORDS * emsg[1]  # the entry's key = 1 (always written: F_EMIT)
    if kf[0] != 1 or (kf[4] & F_REPEATED) or m.cols[kf[2]].parent != sc:
        return E_OK
    k = m.cols + kf[2]
    if k.n != m.cols[sc].n or k.kind == K_LIST or k.kind == K_STRUCT or k.kind == K_NULLT:
        return E_OK
    return _keep_last_entries(m.cols, m.ncols, NULL, sc, kf[2], s)
