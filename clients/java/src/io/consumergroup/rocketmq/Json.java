package io.consumergroup.rocketmq;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small JSON reader for the agent's responses, so the strategy needs nothing beyond the JDK. It reads
 * objects as {@code Map<String, Object>}, arrays as {@code List<Object>}, strings, whole numbers as
 * {@code Long}, other numbers as {@code Double}, booleans and null; it refuses anything else.
 */
final class Json {
    /** The deepest nesting it reads: the agent's responses nest three levels. */
    private static final int MAX_DEPTH = 64;

    private final String s;
    private int pos;

    private Json(String s) {
        this.s = s;
    }

    /** Parses one JSON value that makes up the whole of text. */
    static Object parse(String text) {
        Json p = new Json(text);
        p.space();
        Object v = p.value(0);
        p.space();
        if (p.pos != p.s.length()) {
            throw p.error("unexpected text after the value");
        }
        return v;
    }

    private Object value(int depth) {
        if (depth > MAX_DEPTH) {
            throw error("nested deeper than " + MAX_DEPTH);
        }
        if (pos >= s.length()) {
            throw error("unexpected end");
        }
        char c = s.charAt(pos);
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected '" + c + "'");
        }
    }

    private Map<String, Object> object(int depth) {
        Map<String, Object> m = new LinkedHashMap<>();
        elements('}', () -> {
            if (!peek('"')) {
                throw error("expected a member name");
            }
            String key = string();
            space();
            expect(':');
            space();
            m.put(key, value(depth + 1));
        });
        return m;
    }

    private List<Object> array(int depth) {
        List<Object> l = new ArrayList<>();
        elements(']', () -> l.add(value(depth + 1)));
        return l;
    }

    /**
     * Reads the comma-separated elements of an object or an array, from its opening bracket at pos through
     * its closing one, close, calling element for each.
     */
    private void elements(char close, Runnable element) {
        pos++; // the opening bracket
        space();
        if (peek(close)) {
            pos++;
            return;
        }
        while (true) {
            space();
            element.run();
            space();
            if (peek(',')) {
                pos++;
                continue;
            }
            expect(close);
            return;
        }
    }

    private String string() {
        pos++; // "
        StringBuilder b = new StringBuilder();
        while (true) {
            if (pos >= s.length()) {
                throw error("unterminated string");
            }
            char c = s.charAt(pos++);
            if (c == '"') {
                return b.toString();
            }
            if (c < 0x20) {
                throw error("control character in string");
            }
            if (c != '\\') {
                b.append(c);
                continue;
            }
            if (pos >= s.length()) {
                throw error("unterminated escape");
            }
            char e = s.charAt(pos++);
            switch (e) {
                case '"', '\\', '/' -> b.append(e);
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'n' -> b.append('\n');
                case 'r' -> b.append('\r');
                case 't' -> b.append('\t');
                case 'u' -> {
                    if (pos + 4 > s.length()) {
                        throw error("short \\u escape");
                    }
                    try {
                        b.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                    } catch (NumberFormatException ex) {
                        throw error("bad \\u escape");
                    }
                    pos += 4;
                }
                default -> throw error("bad escape \\" + e);
            }
        }
    }

    private Object number() {
        int start = pos;
        if (peek('-')) {
            pos++;
        }
        boolean integral = true;
        while (pos < s.length()) {
            char c = s.charAt(pos);
            if (c >= '0' && c <= '9') {
                pos++;
            } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
                integral = false;
                pos++;
            } else {
                break;
            }
        }
        String n = s.substring(start, pos);
        try {
            return integral ? (Object) Long.parseLong(n) : (Object) Double.parseDouble(n);
        } catch (NumberFormatException ex) {
            throw error("bad number " + n);
        }
    }

    private Object literal(String word, Object v) {
        if (!s.startsWith(word, pos)) {
            throw error("unexpected literal");
        }
        pos += word.length();
        return v;
    }

    private void space() {
        while (pos < s.length()) {
            char c = s.charAt(pos);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            pos++;
        }
    }

    private boolean peek(char c) {
        return pos < s.length() && s.charAt(pos) == c;
    }

    private void expect(char c) {
        if (!peek(c)) {
            throw error("expected '" + c + "'");
        }
        pos++;
    }

    private IllegalArgumentException error(String what) {
        return new IllegalArgumentException("JSON at offset " + pos + ": " + what);
    }
}
