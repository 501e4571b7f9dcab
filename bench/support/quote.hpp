#pragma once
// User text inside messages (orchmllm-bench, the flag parser bench/support/args.hpp): the
// library's own quoting (orchmllm/detail/core/text.hpp), so the tool and the library's text
// forms (core/text_forms.hpp) echo user text alike. An input is not trusted: a 10 MB header line
// or binary bytes must not end up whole (or raw) in a one-line error message.

#include <orchmllm/detail/core/text.hpp>

namespace orchmllm::tool {

/// Printable form of text (no quotes): bytes outside printable ASCII as \xNN, a backslash as
/// \\, cut after `limit` input bytes with "...(N more bytes)". O(min(size, limit)).
using ::orchmllm::detail::printable;

/// `printable(text)` in single quotes: how messages echo what the user wrote.
using ::orchmllm::detail::quote_text;

}  // namespace orchmllm::tool
