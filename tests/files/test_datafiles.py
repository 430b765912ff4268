import gzip
import pickle

import numpy as np
import pytest

from pipelines.files.datafiles import (Batch, CsvReader, DataError, LibsvmReader,
                                 guess_format, open_reader)


def write(tmp_path, name, text):
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def read_all(reader, batch_size=4096):
    """Concatenate all batches into (dense X, y, lines)."""
    rows, ys, lines = [], [], []
    width = reader.n_features or 0
    batches = list(reader.batches(batch_size))
    for b in batches:
        assert isinstance(b, Batch)
        assert b.indptr.dtype == np.int64 and b.indices.dtype == np.int64
        assert b.data.dtype == np.float64 and b.y.dtype == np.float64
        assert b.lines.dtype == np.int64
        assert len(b.indptr) == len(b.y) + 1 == len(b.lines) + 1
        assert not np.any(b.data == 0)
        if len(b.indices):
            width = max(width, int(b.indices.max()) + 1)
    for b in batches:
        for r in range(len(b.y)):
            lo, hi = b.indptr[r], b.indptr[r + 1]
            idx = b.indices[lo:hi]
            assert np.all(np.diff(idx) > 0), "indices sorted within a row"
            row = np.zeros(width)
            row[idx] = b.data[lo:hi]
            rows.append(row)
        ys.extend(b.y.tolist())
        lines.extend(b.lines.tolist())
    X = np.array(rows).reshape(len(rows), width)
    return X, ys, lines


def error_of(fn):
    with pytest.raises(DataError) as info:
        fn()
    return info.value


def read_error(reader):
    return error_of(lambda: list(reader.batches(2)))


# ------------------------------------------------------------------ basics

def test_data_error_format_and_attributes():
    e = DataError("f.csv", 3, 7, "bad")
    assert str(e) == "f.csv:3:7: bad"
    assert (e.path, e.line, e.column, e.message) == ("f.csv", 3, 7, "bad")
    assert isinstance(e, ValueError)
    assert str(DataError("f.csv", 0, 0, "bad")) == "f.csv: bad"
    assert str(DataError("f.csv", 4, 0, "bad")) == "f.csv:4: bad"
    again = pickle.loads(pickle.dumps(e))
    assert str(again) == "f.csv:3:7: bad" and again.column == 7


@pytest.mark.parametrize("name,fmt", [
    ("a.csv", "csv"), ("a.tsv", "csv"), ("A.CSV.GZ", "csv"), ("a.tsv.gz", "csv"),
    ("a.libsvm", "libsvm"), ("a.svm", "libsvm"), ("a.svmlight", "libsvm"),
    ("a.lsvm", "libsvm"), ("dir/a.svm.gz", "libsvm"),
])
def test_guess_format(name, fmt):
    assert guess_format(name) == fmt


def test_guess_format_unknown():
    e = error_of(lambda: guess_format("data.txt"))
    assert str(e) == "data.txt: cannot guess the format from the extension; pass --format csv|libsvm"
    assert (e.line, e.column) == (0, 0)


def test_open_reader_dispatch(tmp_path):
    p = write(tmp_path, "d.txt", "1,2\n")
    assert isinstance(open_reader(p, "csv"), CsvReader)
    assert isinstance(open_reader(p, "libsvm", label="y"), LibsvmReader)  # label ignored
    assert isinstance(open_reader(write(tmp_path, "d.csv", "1,2\n")), CsvReader)
    with pytest.raises(DataError):
        open_reader(p)


# --------------------------------------------------------------------- CSV

def test_csv_without_header(tmp_path):
    p = write(tmp_path, "d.csv", "1,2,0\n0,0,3.5\n-1,4,5\n")
    r = open_reader(p)
    assert r.path == p
    assert r.n_features == 2 and r.feature_names == ["c0", "c1"]
    X, y, lines = read_all(r)
    assert y == [1, 0, -1]
    np.testing.assert_array_equal(X, [[2, 0], [0, 3.5], [4, 5]])
    assert lines == [1, 2, 3]


def test_csv_with_header_auto_and_label_by_name(tmp_path):
    p = write(tmp_path, "d.csv", "a,b,y\n1,2,10\n3,0,20\n")
    r = open_reader(p, label="y")
    assert r.feature_names == ["a", "b"] and r.n_features == 2
    X, y, lines = read_all(r)
    np.testing.assert_array_equal(X, [[1, 2], [3, 0]])
    assert y == [10, 20] and lines == [2, 3]


def test_csv_header_yes_and_no(tmp_path):
    p = write(tmp_path, "d.csv", "5,6\n7,8\n")
    X, y, _ = read_all(open_reader(p, header="yes"))
    assert y == [7] and X.tolist() == [[8]]
    assert open_reader(p, header=True).feature_names == ["6"]
    X, y, _ = read_all(open_reader(p, header="no"))
    assert y == [5, 7]
    q = write(tmp_path, "h.csv", "a,b\n1,2\n")
    with pytest.raises(DataError):  # header row forced to be data -> non-numeric
        list(open_reader(q, header=False).batches())


@pytest.mark.parametrize("label", [2, "2", -1, "-1"])
def test_csv_label_by_index(tmp_path, label):
    p = write(tmp_path, "d.csv", "1,2,10\n3,4,20\n")
    r = open_reader(p, label=label)
    X, y, _ = read_all(r)
    assert y == [10, 20]
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])


def test_csv_label_in_the_middle_keeps_feature_order(tmp_path):
    p = write(tmp_path, "d.csv", "a,y,b,c\n1,9,2,3\n")
    r = open_reader(p, label="y")
    assert r.feature_names == ["a", "b", "c"]
    X, y, _ = read_all(r)
    assert X.tolist() == [[1, 2, 3]] and y == [9]


def test_csv_sniffs_semicolon_and_tab(tmp_path):
    p = write(tmp_path, "d.csv", "y;x1;x2\n1;2.5;3\n")
    r = open_reader(p)
    assert r.feature_names == ["x1", "x2"]
    X, y, _ = read_all(r)
    assert X.tolist() == [[2.5, 3]] and y == [1]
    t = write(tmp_path, "d.tsv", "1\t2\t3\n")
    X, y, _ = read_all(open_reader(t))
    assert X.tolist() == [[2, 3]] and y == [1]


def test_csv_explicit_delimiter_overrides_sniffing(tmp_path):
    p = write(tmp_path, "d.csv", "y,a;b\n1,2;3\n")  # tie -> sniffing picks ','
    assert open_reader(p).feature_names == ["a;b"]
    r = open_reader(p, delimiter=";")
    assert r.feature_names == ["b"]
    assert str(read_error(r)) == f"{p}:2:1: non-numeric value '1,2' in column 'y,a'"


def test_csv_quoted_fields_and_whitespace(tmp_path):
    p = write(tmp_path, "d.csv", '"label", "a,b" ,c\n "1" , 2 ,"3"\n')
    r = open_reader(p)
    assert r.feature_names == ["a,b", "c"]
    X, y, _ = read_all(r)
    assert X.tolist() == [[2, 3]] and y == [1]


def test_csv_gz_and_bom(tmp_path):
    p = write(tmp_path, "d.csv.gz", "\ufeffy,a\n1,2\n0,3\n")
    r = open_reader(p, label="y")
    X, y, _ = read_all(r)
    assert X.tolist() == [[2], [3]] and y == [1, 0]


def test_csv_blank_lines_keep_line_numbers(tmp_path):
    p = write(tmp_path, "d.csv", "\na,b\n\n1,2\n   \n3,4\n\n")
    X, y, lines = read_all(open_reader(p))
    assert y == [1, 3] and lines == [4, 6]


def test_csv_batches_and_rereading(tmp_path):
    rows = [f"{i},{i * 10},{0 if i % 2 else i}" for i in range(10)]
    p = write(tmp_path, "d.csv", "\n".join(rows) + "\n")
    r = open_reader(p)
    batches = list(r.batches(3))
    assert [len(b.y) for b in batches] == [3, 3, 3, 1]
    assert batches[1].lines.tolist() == [4, 5, 6]
    X, y, lines = read_all(r, batch_size=3)
    assert y == list(range(10)) and lines == list(range(1, 11))
    np.testing.assert_array_equal(X, [[i * 10, 0 if i % 2 else i] for i in range(10)])
    X2, y2, _ = read_all(r, batch_size=4)  # second pass, other batch size
    np.testing.assert_array_equal(X, X2)
    assert y == y2


def test_csv_zeros_dropped(tmp_path):
    p = write(tmp_path, "d.csv", "1,0,2,-0.0,0e5\n")
    (b,) = open_reader(p).batches()
    assert b.indices.tolist() == [1] and b.data.tolist() == [2.0]
    assert b.indptr.tolist() == [0, 1]


def test_dense_rows_match_numpys_nonzero_and_gather():
    """The compiled dense -> CSR step against the obvious numpy one, on
    signed zeros, subnormals, huge values, empty rows and column subsets."""
    from pipelines.files.datafiles import _dense_rows

    rng = np.random.default_rng(7)
    for _ in range(300):
        n, m = int(rng.integers(0, 40)), int(rng.integers(1, 12))
        dense = rng.choice([0.0, -0.0, 5e-324, 1e-308, -1.5, 1e308, 3.0], size=(n, m))
        columns = np.sort(rng.choice(m, size=int(rng.integers(0, m + 1)), replace=False)).astype(np.int64)
        x = dense[:, columns]
        rows, cols = np.nonzero(x)
        indptr, indices, data = _dense_rows(dense, columns)
        assert indptr.tolist() == [0] + np.cumsum(np.bincount(rows, minlength=n)).tolist()
        assert indices.tolist() == cols.tolist()
        assert data.tobytes() == x[rows, cols].tobytes()


def test_csv_label_only_file(tmp_path):
    p = write(tmp_path, "d.csv", "1\n2\n")
    r = open_reader(p)
    assert r.n_features == 0
    (b,) = r.batches()
    assert b.y.tolist() == [1, 2] and b.indptr.tolist() == [0, 0, 0]


# CSV errors -------------------------------------------------------------

def test_csv_open_errors(tmp_path):
    missing = str(tmp_path / "nope.csv")
    e = error_of(lambda: open_reader(missing))
    assert str(e) == f"{missing}: cannot read: No such file or directory"
    d = tmp_path / "dir.csv"
    d.mkdir()
    assert "cannot read: " in str(error_of(lambda: open_reader(str(d))))
    fake = tmp_path / "fake.csv.gz"
    fake.write_text("1,2\n")
    e = error_of(lambda: open_reader(str(fake)))
    assert str(e).startswith(f"{fake}: cannot read: ") and (e.line, e.column) == (0, 0)


def test_csv_empty_file(tmp_path):
    p = write(tmp_path, "d.csv", "\n\n")
    assert str(error_of(lambda: open_reader(p))) == f"{p}: empty file"


def test_csv_label_errors(tmp_path):
    nohead = write(tmp_path, "n.csv", "1,2,3\n")
    e = error_of(lambda: open_reader(nohead, label="y"))
    assert str(e) == f"{nohead}:1: label column 'y' named but the file has no header; give its index instead"
    assert (e.line, e.column) == (1, 0)
    head = write(tmp_path, "h.csv", "a,b,c\n1,2,3\n")
    e = error_of(lambda: open_reader(head, label="y"))
    assert str(e) == f"{head}:1: no label column 'y' in header (columns: a, b, c)"
    e = error_of(lambda: open_reader(head, label=3))
    assert "3" in e.message and "3 columns" in e.message
    e = error_of(lambda: open_reader(head, label=-4))
    assert "-4" in e.message and "3 columns" in e.message


def test_csv_field_count(tmp_path):
    p = write(tmp_path, "d.csv", "a,b,c\n1,2,3\n\n4,5\n")
    e = read_error(open_reader(p))
    assert str(e) == f"{p}:4: expected 3 fields, found 2"
    assert (e.line, e.column) == (4, 0)


def test_csv_non_numeric_with_column(tmp_path):
    p = write(tmp_path, "d.csv", "a,b,c\n1,2,3\n4,  abc ,6\n")
    e = read_error(open_reader(p))
    assert str(e) == f"{p}:3:5: non-numeric value 'abc' in column 'b'"
    assert (e.line, e.column, e.message) == (3, 5, "non-numeric value 'abc' in column 'b'")


def test_csv_non_numeric_without_header_names_index(tmp_path):
    p = write(tmp_path, "d.csv", "1,2,3\n1,2,x\n")
    e = read_error(open_reader(p))
    assert str(e) == f"{p}:2:5: non-numeric value 'x' in column 2"


def test_csv_non_numeric_in_label(tmp_path):
    p = write(tmp_path, "d.csv", "a,y\n1,2\n3,yes\n")
    e = read_error(open_reader(p, label="y"))
    assert str(e) == f"{p}:3:3: non-numeric value 'yes' in column 'y'"


def test_csv_empty_value(tmp_path):
    p = write(tmp_path, "d.csv", "a,b,c\n1,,3\n")
    assert str(read_error(open_reader(p))) == f"{p}:2:3: empty value in column 'b'"
    q = write(tmp_path, "e.csv", "a,b,c\n1,2,   \n")
    assert str(read_error(open_reader(q))) == f"{q}:2:5: empty value in column 'c'"


@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity", "NaN"])
def test_csv_non_finite(tmp_path, bad):
    p = write(tmp_path, "d.csv", f"a,b\n1,2\n3,{bad}\n")
    assert str(read_error(open_reader(p))) == f"{p}:3:3: non-finite value {bad!r} in column 'b'"
    q = write(tmp_path, "l.csv", f"a,b\n{bad},2\n")
    assert str(read_error(open_reader(q))) == f"{q}:2:1: non-finite value {bad!r} in column 'a'"


def test_csv_error_column_after_quoted_fields(tmp_path):
    # quoted fields may hold the delimiter and doubled quotes; the column
    # must still point at the start of the offending field
    p = write(tmp_path, "d.csv", 'a,"b ""x"", y",c\n1,2,"o,p"\n')
    assert str(read_error(open_reader(p))) == f"{p}:2:5: non-numeric value 'o,p' in column 'c'"
    q = write(tmp_path, "q.csv", 'a;b;c\n1; "2"; "x;y"\n')
    assert str(read_error(open_reader(q))) == f"{q}:2:9: non-numeric value 'x;y' in column 'c'"


def test_csv_error_in_multiline_quoted_record(tmp_path):
    # the record spans lines 2-3; line 3 is `",2,bad`: 'bad' is at column 5
    p = write(tmp_path, "d.csv", 'a,b,c\n"1\n",2,bad\n')
    assert str(read_error(open_reader(p))) == f"{p}:3:5: non-numeric value 'bad' in column 'c'"


def test_csv_error_in_later_batch_has_right_line(tmp_path):
    rows = [f"{i},{i}" for i in range(7)] + ["1,?"]
    p = write(tmp_path, "d.csv", "\n".join(rows))  # no trailing newline
    assert str(read_error(open_reader(p))) == f"{p}:8:3: non-numeric value '?' in column 1"


# ------------------------------------------------------------------ libsvm

def test_libsvm_parsing(tmp_path):
    text = (
        "# a comment line\n"
        "1 3:0.5 1:2 10:-1\n"
        "\n"
        "-1\tqid:7 2:1.5 # trailing comment 4:4\n"
        "0.25 5:0 6:3e1\n"
        "   \n"
        "2\n"
    )
    p = write(tmp_path, "d.libsvm", text)
    r = open_reader(p, label="y")
    assert r.feature_names is None and r.n_features is None
    (b,) = r.batches()
    assert b.y.tolist() == [1, -1, 0.25, 2]
    assert b.lines.tolist() == [2, 4, 5, 7]
    assert b.indptr.tolist() == [0, 3, 4, 5, 5]
    assert b.indices.tolist() == [1, 3, 10, 2, 6]  # sorted, not shifted, zero 5:0 dropped
    assert b.data.tolist() == [2, 0.5, -1, 1.5, 30]


def test_libsvm_gz_batches_and_rereading(tmp_path):
    lines = [f"{i} {i + 1}:{i} 0:1" for i in range(10)]
    p = write(tmp_path, "d.svm.gz", "\n".join(lines) + "\n")
    r = open_reader(p)
    batches = list(r.batches(3))
    assert [len(b.y) for b in batches] == [3, 3, 3, 1]
    X, y, ln = read_all(r, batch_size=3)
    assert y == list(range(10)) and ln == list(range(1, 11))
    expected = np.zeros((10, 11))
    expected[:, 0] = 1
    for i in range(1, 10):
        expected[i, i + 1] = i
    np.testing.assert_array_equal(X, expected)
    X2, y2, _ = read_all(r, batch_size=100)
    np.testing.assert_array_equal(X, X2)
    assert y == y2


def test_libsvm_open_errors(tmp_path):
    missing = str(tmp_path / "x.svm")
    assert str(error_of(lambda: open_reader(missing))) == f"{missing}: cannot read: No such file or directory"
    fake = tmp_path / "x.svm.gz"
    fake.write_text("1 1:1\n")
    assert str(error_of(lambda: open_reader(str(fake)))).startswith(f"{fake}: cannot read: ")


@pytest.mark.parametrize("line,col,message", [
    ("1 1:1 abc 2:2", 7, "malformed feature token 'abc' (expected index:value)"),
    ("1 3:", 3, "malformed feature token '3:' (expected index:value)"),
    ("1 :4", 3, "malformed feature token ':4' (expected index:value)"),
    ("1 2:1  -3:1", 8, "negative feature index -3"),
    ("1 1.5:2", 3, "non-integer feature index '1.5'"),
    ("1\t4:1 3:x", 7, "non-numeric value 'x' for feature 3"),
    ("1 3:nan", 3, "non-finite value 'nan' for feature 3"),
    ("1 3:-inf", 3, "non-finite value '-inf' for feature 3"),
    ("1 3:1 4:2 3:0", 11, "duplicate feature index 3"),
    ("1,2 1:1", 1, "non-numeric value '1,2' for the label"),
    ("  nan 1:1", 3, "non-finite value 'nan' for the label"),
])
def test_libsvm_errors(tmp_path, line, col, message):
    p = write(tmp_path, "d.libsvm", "1 1:1\n# comment\n" + line + "\n")
    e = read_error(open_reader(p))
    assert (e.line, e.column, e.message) == (3, col, message)
    assert str(e) == f"{p}:3:{col}: {message}"


def test_libsvm_error_in_comment_is_ignored(tmp_path):
    p = write(tmp_path, "d.libsvm", "1 1:1 #3:nan bogus\n")
    (b,) = open_reader(p).batches()
    assert b.indices.tolist() == [1]
