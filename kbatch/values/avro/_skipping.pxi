# Included by ``_avrokernel.pyx`` (after ``_reading.pxi``): ``SKIP``, the instruction that walks
# past the values of writer types the reader does not keep (fields it lacks, or a projection
# leaves out) in one dispatch, by a *skip tree* in ``aux`` that the compiler
# (``kbatch.values.avro._compile``) writes and the verifier (``kbatch.values.avro._verify``)
# checks: a sequence is ``count`` then ``count`` nodes of three words ``(kind, x, y)``:
#
#     VARINT  0  0        an int, long or enum: one zigzag varint (at most 10 bytes)
#     BYTES   0  0        a string or bytes: a length, then that many bytes
#     FIXED   n  0        n bytes (booleans, floats, doubles, fixeds; consecutive ones merged)
#     UNION   n  table    a branch index in [0, n), then the sequence at aux[table + index]
#     CHOICE  n  table    a union whose branches are each one VARINT, BYTES or FIXED at most (a
#                         nullable string, say): a branch index in [0, n), then the value of
#                         aux[table + index]: 0 nothing, -1 a varint, -2 a length and bytes,
#                         k > 0 k bytes (walked in the one step, no sequence entered)
#     ARRAY   m  seq      blocks of items (an array's, or a map's: key and value), each the
#                         sequence at seq; m is an item's fewest bytes, as ARRAY's operand
#
# Records are inlined (their fields' nodes in order); null and zero-size fixeds take no node.
# Every sequence a node refers to lies after the node in ``aux`` (the tree is acyclic: recursive
# types are skipped by GOSUB subroutines instead) and is nested at most ``MAX_SKIP_NESTING``
# unions and arrays deep, so the walk's stack is bounded. The bytes are checked as the
# instruction-by-instruction skip checks them: every length and count against the bytes left
# (``_length``, ``_count``: negative lengths, item counts that cannot fit, ``max_items``, a
# block's byte size), varints at most 10 bytes, a union's branch index in range, and arrays
# nested at most ``MAX_DEPTH`` deep with the machine's own loops. The contents are not decoded:
# a skipped string's UTF-8, an enum's index, a boolean's byte are not looked at.

cdef enum SkipNode:
    SK_VARINT = 1
    SK_BYTES = 2
    SK_FIXED = 3
    SK_UNION = 4
    SK_ARRAY = 5
    SK_CHOICE = 6

cdef enum:
    MAX_SKIP_NESTING = 32

#: Skip tree node kinds (the compiler and the verifier take their numbers from here).
SKIP_NODES = {"VARINT": SK_VARINT, "BYTES": SK_BYTES, "FIXED": SK_FIXED, "UNION": SK_UNION, "ARRAY": SK_ARRAY,
              "CHOICE": SK_CHOICE}
#: How deep unions and arrays may nest in one skip tree.
SKIP_NESTING = MAX_SKIP_NESTING


cdef struct SkipLevel:
    const int32_t* node      # the sequence's next node
    int32_t left             # its nodes left
    const int32_t* array     # the ARRAY node whose item this sequence is (NULL: a union's branch)
    int64_t remaining        # the items left in the block after this one
    int64_t items            # the items of the blocks so far (for max_items)
    const uint8_t* block_end  # where the block must end (NULL: a block without a byte size)
    int64_t block_size


cdef int _skip_tree(Machine* m, const int32_t* aux, int32_t seq, const uint8_t** pp, const uint8_t* end,
                    const uint8_t** where) noexcept nogil:
    """Walk past the values of the skip sequence at ``aux[seq]`` from ``pp[0]`` (moved past
    them), without recursion: a stack of the sequences entered (a union's branch, an array's
    item), at most ``MAX_SKIP_NESTING`` deep. On an error, ``where[0]`` is the start of the value
    that failed."""
    cdef SkipLevel st[MAX_SKIP_NESTING + 1]
    cdef SkipLevel* s = &st[0]
    cdef int top = 0, loops = 0, e = E_OK
    cdef const uint8_t* p = pp[0]
    cdef const uint8_t* at = p
    cdef const uint8_t* q
    cdef const int32_t* node
    cdef int32_t kind, branch
    cdef int64_t v, n
    cdef Frame f
    s.node = aux + seq + 1
    s.left = aux[seq]
    s.array = NULL
    while True:
        if s.left == 0:
            if s.array == NULL:  # a union's branch (or the whole tree) is done
                if top == 0:
                    break
                top -= 1
                s = &st[top]
                continue
            if s.remaining > 0:  # the block's next item
                s.remaining -= 1
                s.node = aux + s.array[2] + 1
                s.left = aux[s.array[2]]
                continue
            if s.block_end != NULL and p != s.block_end:
                m.err_detail = s.block_size
                e = E_BLOCK_SIZE
                break
            at = p
            if p < end and p[0] == 0:  # the end of the items: the common case
                p += 1
                n = 0
            else:
                q = _count(m, p, end, s.array[1], s.items, &n, &f, &e)
                if q == NULL:
                    break
                p = q
            if n == 0:  # the array is done
                loops -= 1
                top -= 1
                s = &st[top]
                continue
            s.items += n
            s.remaining = n - 1
            s.block_end = f.block_end
            s.block_size = f.block_size
            s.node = aux + s.array[2] + 1
            s.left = aux[s.array[2]]
            continue
        node = s.node
        s.node += 3
        s.left -= 1
        kind = node[0]
        at = p
        if kind == SK_VARINT:
            if p < end and p[0] < 0x80:
                p += 1
            else:
                q = p
                e = _varint(&q, end, &v)
                if e:
                    break
                p = q
        elif kind == SK_BYTES:
            if p < end and p[0] < 0x80:
                v = <int64_t>(p[0] >> 1) ^ -<int64_t>(p[0] & 1)
                p += 1
            else:
                q = p
                e = _varint(&q, end, &v)
                if e:
                    break
                p = q
            e = _length(m, v, p, end)
            if e:
                break
            p += v
        elif kind == SK_FIXED:
            e = _length(m, node[1], p, end)
            if e:
                break
            p += node[1]
        elif kind == SK_CHOICE:
            if p < end and p[0] < 0x80:
                v = <int64_t>(p[0] >> 1) ^ -<int64_t>(p[0] & 1)
                p += 1
            else:
                q = p
                e = _varint(&q, end, &v)
                if e:
                    break
                p = q
            if v < 0 or v >= node[1]:
                m.err_detail = v
                e = E_UNION
                break
            branch = aux[node[2] + v]
            if branch > 0:
                e = _length(m, branch, p, end)
                if e:
                    break
                p += branch
            elif branch == -1:
                q = p
                e = _varint(&q, end, &v)
                if e:
                    break
                p = q
            elif branch == -2:
                q = p
                e = _varint(&q, end, &v)
                if e:
                    break
                p = q
                e = _length(m, v, p, end)
                if e:
                    break
                p += v
        elif kind == SK_UNION:
            if p < end and p[0] < 0x80:
                v = <int64_t>(p[0] >> 1) ^ -<int64_t>(p[0] & 1)
                p += 1
            else:
                q = p
                e = _varint(&q, end, &v)
                if e:
                    break
                p = q
            if v < 0 or v >= node[1]:
                m.err_detail = v
                e = E_UNION
                break
            branch = aux[node[2] + v]
            if aux[branch] == 0:
                continue  # a branch of nothing (null)
            if top >= MAX_SKIP_NESTING:  # (the verifier bounds the nesting: a guard of the stack)
                e = E_DEPTH
                break
            top += 1
            s = &st[top]
            s.node = aux + branch + 1
            s.left = aux[branch]
            s.array = NULL
        else:  # SK_ARRAY
            if m.depth + loops >= MAX_DEPTH or top >= MAX_SKIP_NESTING:
                e = E_DEPTH
                break
            if p < end and p[0] < 0x80 and not (p[0] & 1) and node[1] > 0 and \
                    (p[0] >> 1) * <int64_t>node[1] <= end - p - 1:
                n = p[0] >> 1  # a one-byte count that fits the bytes left: the common case
                p += 1
                f.block_end = NULL
            else:
                q = _count(m, p, end, node[1], 0, &n, &f, &e)
                if q == NULL:
                    break
                p = q
            if n == 0:
                continue
            if aux[node[2]] == 1 and aux[node[2] + 1] == SK_FIXED and aux[node[2] + 2] == node[1]:
                v = n  # items of one size, each block jumped over (_count checked that it fits)
                while n > 0:
                    p += n * node[1]
                    if f.block_end != NULL and p != f.block_end:
                        m.err_detail = f.block_size
                        e = E_BLOCK_SIZE
                        break
                    at = p
                    q = _count(m, p, end, node[1], v, &n, &f, &e)
                    if q == NULL:
                        break
                    p = q
                    v += n
                if e:
                    break
                continue
            top += 1
            loops += 1
            s = &st[top]
            s.array = node
            s.items = n
            s.remaining = n - 1
            s.block_end = f.block_end
            s.block_size = f.block_size
            s.node = aux + node[2] + 1
            s.left = aux[node[2]]
    if e:
        where[0] = at
        return e
    pp[0] = p
    return E_OK
