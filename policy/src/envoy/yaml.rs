//! A YAML document as a tree whose every node knows where it is written, so that each
//! error in an Envoy rate limit file names its line and column.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span, StrInput};

/// Where a node starts: line and column, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct At {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl From<Span> for At {
    fn from(span: Span) -> Self {
        Self {
            line: span.start.line(),
            column: span.start.col() + 1,
        }
    }
}

/// A node and where it is written.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) at: At,
    pub(crate) value: Value,
}

#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// A scalar's text, and whether it was written plain (unquoted): only a plain
    /// `~`, `null` or nothing is null, as in YAML.
    Scalar(String, bool),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// Whether this is YAML's null (`~`, `null`, or nothing at all).
    pub(crate) fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar(text, true) if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }
}

/// An error and where it is.
pub(crate) type Located = (At, String);

/// The deepest nesting read, an alias nesting its anchor's levels from where it stands:
/// a file nested deeper is refused rather than read by a recursion without bound.
const MAX_DEPTH: usize = 64;

/// The most nodes a document may stand for, aliases counted as what they repeat.
const MAX_NODES: usize = 1_000_000;

/// The bytes a node weighs beyond its text: the least one takes written (`a,`).
const NODE_BYTES: usize = 2;

/// The least weight aliases may repeat in any file; a larger file may repeat its own
/// length: a few anchors repeating each other cannot make a small file stand for more
/// than one twice its size.
const MIN_REPEATED: usize = 64 << 10;

/// What a node stands for: its nodes, and its weight (each node's text and
/// [`NODE_BYTES`]).
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    nodes: usize,
    bytes: usize,
}

/// An anchored node, its size and its height in levels below it.
type Anchored = (Node, Size, usize);

struct Reader<'a> {
    parser: Parser<'a, StrInput<'a>>,
    /// Anchored nodes, how many nodes each stands for and how many levels it nests
    /// below itself: an alias repeats them where it is, deeper than they were written.
    anchors: HashMap<usize, Anchored>,
    /// What the nodes read so far stand for, aliases counted in full.
    read: Size,
    /// The weight aliases have repeated so far, and the most they may.
    repeated: usize,
    max_repeated: usize,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), Located> {
        match self.parser.next() {
            Some(Ok(event)) => Ok(event),
            Some(Err(e)) => Err((
                At {
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                },
                e.info().to_owned(),
            )),
            None => Err((At::default(), "unexpected end of the document".into())),
        }
    }

    /// The node that `event` starts at `depth`, and how many levels it nests below
    /// itself.
    fn node(
        &mut self,
        event: Event<'a>,
        span: Span,
        depth: usize,
    ) -> Result<(Node, usize), Located> {
        let at = At::from(span);
        let too_deep = || (at, format!("nested deeper than {MAX_DEPTH} levels"));
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let first = self.read;
        let text = match &event {
            Event::Scalar(text, ..) => text.len(),
            _ => 0,
        };
        self.count(
            at,
            Size {
                nodes: 1,
                bytes: NODE_BYTES.saturating_add(text),
            },
        )?;
        let (value, height, anchor) = match event {
            Event::Scalar(text, style, anchor, _) => (
                Value::Scalar(text.into_owned(), style == ScalarStyle::Plain),
                0,
                anchor,
            ),
            Event::SequenceStart(anchor, _) => {
                let (items, height) = self.children(depth)?;
                (Value::Seq(items), height, anchor)
            }
            Event::MappingStart(anchor, _) => {
                let (nodes, height) = self.children(depth)?;
                // Keys and values in turn (the parser ends a mapping only after a value).
                let mut nodes = nodes.into_iter();
                let pairs = std::iter::from_fn(|| Some((nodes.next()?, nodes.next()?)));
                (Value::Map(pairs.collect()), height, anchor)
            }
            Event::Alias(id) => {
                let no_anchor = || (at, "an alias to no anchor".to_owned());
                let anchored = self.anchors.get(&id);
                let (size, height) = anchored
                    .map(|(_, size, height)| (*size, *height))
                    .ok_or_else(no_anchor)?;
                // Repeated here, the anchored node nests from this depth.
                if depth + height > MAX_DEPTH {
                    return Err(too_deep());
                }
                self.repeat(at, size)?;
                // Copied only once counted, so a refused alias copies nothing.
                let node = self.anchors.get(&id).map(|(node, ..)| node.clone());
                let node = node.ok_or_else(no_anchor)?;
                return Ok((Node { at, ..node }, height));
            }
            _ => return Err((at, "unexpected YAML event".into())),
        };
        let node = Node { at, value };
        if anchor != 0 {
            let size = Size {
                nodes: self.read.nodes - first.nodes,
                bytes: self.read.bytes - first.bytes,
            };
            self.anchors.insert(anchor, (node.clone(), size, height));
        }
        Ok((node, height))
    }

    /// The nodes of a sequence or a mapping (its keys and values in turn) read up to its
    /// end, and how many levels they nest below it.
    fn children(&mut self, depth: usize) -> Result<(Vec<Node>, usize), Located> {
        let mut children = Vec::new();
        let mut height = 0;
        loop {
            match self.next()? {
                (Event::SequenceEnd | Event::MappingEnd, _) => return Ok((children, height)),
                (event, span) => {
                    let (child, below) = self.node(event, span, depth + 1)?;
                    height = height.max(below + 1);
                    children.push(child);
                }
            }
        }
    }

    /// Counts `more` read, refusing past [`MAX_NODES`].
    fn count(&mut self, at: At, more: Size) -> Result<(), Located> {
        self.read.nodes = self.read.nodes.saturating_add(more.nodes);
        self.read.bytes = self.read.bytes.saturating_add(more.bytes);
        if self.read.nodes > MAX_NODES {
            return Err((at, format!("more than {MAX_NODES} nodes, aliases counted")));
        }
        Ok(())
    }

    /// Counts an alias repeating `size`, before it is copied: refused past
    /// [`MAX_NODES`], or once aliases repeat more than the file's length (or
    /// [`MIN_REPEATED`]) in weight.
    fn repeat(&mut self, at: At, size: Size) -> Result<(), Located> {
        self.repeated = self.repeated.saturating_add(size.bytes);
        if self.repeated > self.max_repeated {
            return Err((
                at,
                format!(
                    "aliases repeat more than {} bytes of nodes, the file's own size (or 64 KiB): write the repeated parts out, or anchor less",
                    self.max_repeated
                ),
            ));
        }
        self.count(at, size)
    }
}

/// The first document of `text` (as their service reads it), or `None` if it has none.
pub(crate) fn parse(text: &str) -> Result<Option<Node>, Located> {
    let mut reader = Reader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        read: Size::default(),
        repeated: 0,
        max_repeated: text.len().max(MIN_REPEATED),
    };
    loop {
        match reader.next()? {
            (Event::StreamStart, _) => {}
            (Event::StreamEnd, _) => return Ok(None),
            (Event::DocumentStart(_), _) => {
                let (event, span) = reader.next()?;
                let (node, _) = reader.node(event, span, 0)?;
                return Ok(Some(node));
            }
            (_, span) => return Err((At::from(span), "unexpected YAML event".into())),
        }
    }
}
