"""A generated chat set in OpenAI message form: tool use in DSML (get_verse, add, get_weather) with
tool results and final answers, short reasoning inside <think> before an answer, small
arithmetic, and questions about the text.

Every chat is built from a seeded generator, with many phrasings per kind and random arguments,
so the model learns the format rather than a list of answers. A fixed 5% (every 20th chat) is
held out. Revelation never appears (it is the held-out text).
"""

import json
import random

TOOLS = {
    "get_verse": {
        "type": "function",
        "function": {
            "name": "get_verse",
            "description": "Look up one verse of the King James Bible.",
            "parameters": {
                "type": "object",
                "properties": {
                    "book": {"type": "string", "description": "Book name, e.g. Genesis"},
                    "chapter": {"type": "integer"},
                    "verse": {"type": "integer"},
                },
                "required": ["book", "chapter", "verse"],
            },
        },
    },
    "add": {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    },
    "get_weather": {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
}

CITIES = [
    "Paris", "London", "Berlin", "Madrid", "Rome", "Lisbon", "Dublin", "Vienna", "Prague", "Warsaw", "Oslo",
    "Stockholm", "Helsinki", "Athens", "Cairo", "Nairobi", "Lagos", "Tokyo", "Seoul", "Beijing", "Shanghai",
    "Delhi", "Mumbai", "Bangkok", "Jakarta", "Sydney", "Melbourne", "Auckland", "Toronto", "Montreal",
    "Chicago", "Boston", "Denver", "Seattle", "Miami", "Austin", "Mexico City", "Lima", "Bogota", "Santiago",
    "Buenos Aires", "Jerusalem", "Bethlehem", "Nazareth", "Damascus", "Babylon", "Antioch", "Ephesus",
    "Corinth", "Zurich", "Geneva", "Amsterdam", "Brussels", "Copenhagen", "Edinburgh", "Cardiff", "Belfast",
]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "clear", "stormy", "overcast", "mild"]
SYSTEMS = [
    None, None, "You are a helpful assistant.", "You are a concise assistant.",
    "You are a helpful assistant. Use the tools when they help.", "Answer briefly and accurately.",
    "You are a friendly assistant who knows the King James Bible.",
]
EFFORTS = [None, None, "low", "high", "max"]
GREETINGS = [
    ("Hello", "Hello! How can I help you today?"),
    ("Hi there", "Hi! What would you like to know?"),
    ("Good morning", "Good morning! How can I help?"),
    ("Who are you?", "I am a small assistant. I can look up verses, add numbers and check the weather."),
    ("What can you do?", "I can quote verses of the King James Bible, add numbers and tell you the weather."),
    ("Thank you", "You are welcome!"),
    ("Thanks!", "Glad to help."),
]


def _verse_ref(v):
    return f"{v.book} {v.chapter}:{v.verse}"


class ChatGenerator:
    def __init__(self, train_chapters, seed):
        self.rng = random.Random(seed)
        self.verses = [v for _, _, vs in train_chapters for v in vs]
        self.books = []
        for book, _, _ in train_chapters:
            if not self.books or self.books[-1] != book:
                self.books.append(book)
        self.call_count = 0

    # -- helpers ----------------------------------------------------------------------------------
    def pick(self, options):
        return self.rng.choice(options)

    def call(self, name, arguments):
        self.call_count += 1
        return {"id": f"call_{self.call_count}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}

    def tools_for(self, needed):
        """A random subset of the tools that contains `needed` (None: any subset, maybe empty)."""
        names = list(TOOLS)
        self.rng.shuffle(names)
        count = self.rng.randint(1, len(names))
        chosen = names[:count]
        if needed is not None and needed not in chosen:
            chosen[self.rng.randrange(count)] = needed
        return [TOOLS[n] for n in chosen]

    def short_verse(self, max_words=24):
        while True:
            v = self.pick(self.verses)
            if len(v.text.split()) <= max_words:
                return v

    def number(self):
        r = self.rng.random()
        if r < 0.5:
            return self.rng.randint(0, 99)
        if r < 0.85:
            return self.rng.randint(100, 999)
        return self.rng.randint(1000, 9999)

    # -- tool use ---------------------------------------------------------------------------------
    def verse_chat(self, thinking):
        v = self.short_verse()
        ref = _verse_ref(v)
        ask = self.pick([
            f"What does {ref} say?", f"Can you look up {ref}?", f"Quote {ref} for me.", f"Please find {ref}.",
            f"Show me verse {v.verse} of {v.book} chapter {v.chapter}.", f"I want to read {ref}.",
            f"What is written in {v.book} {v.chapter}, verse {v.verse}?", f"Look up {v.book} chapter {v.chapter} verse {v.verse}.",
            f"{ref}?", f"Recite {ref}, please.",
        ])
        call = self.call("get_verse", {"book": v.book, "chapter": v.chapter, "verse": v.verse})
        answer = self.pick([
            f"{ref} says: \"{v.text}\"", f"Here is {ref}: {v.text}", f"{v.text} ({ref})",
            f"In {v.book} {v.chapter}:{v.verse} it is written: {v.text}", f"The verse reads: \"{v.text}\"",
        ])
        reasons = (self.pick([f"The user wants {ref}. I will look it up with get_verse.",
                              f"I need the text of {ref}, so I call get_verse.",
                              f"get_verse can fetch {v.book} chapter {v.chapter}, verse {v.verse}."]),
                   self.pick(["The tool returned the verse, so I quote it.", "I have the text now.",
                              f"The verse text came back for {ref}."]))
        return "get_verse", ask, call, v.text, answer, reasons

    def add_chat(self, thinking):
        a, b = self.number(), self.number()
        ask = self.pick([
            f"What is {a} plus {b}?", f"Add {a} and {b}.", f"Compute {a} + {b}.", f"What's the sum of {a} and {b}?",
            f"What do {a} and {b} add up to?", f"Please add {a} to {b}.", f"{a} + {b} = ?", f"Sum {a} and {b} for me.",
        ])
        call = self.call("add", {"a": a, "b": b})
        total = a + b
        answer = self.pick([f"{a} plus {b} is {total}.", f"The sum is {total}.", f"{a} + {b} = {total}.",
                            f"That adds up to {total}.", f"{total}."])
        reasons = (self.pick([f"I should use the add tool for {a} + {b}.", f"The user wants {a} + {b}; I call add.",
                              "This is an addition, so I use add."]),
                   self.pick([f"The tool says {total}.", f"add returned {total}.", "I have the sum."]))
        return "add", ask, call, str(total), answer, reasons

    def weather_chat(self, thinking):
        city = self.pick(CITIES)
        ask = self.pick([
            f"What's the weather in {city}?", f"How is the weather in {city} today?", f"Is it raining in {city}?",
            f"Tell me the weather for {city}.", f"How warm is it in {city}?", f"Weather in {city}, please.",
            f"What is it like outside in {city} right now?", f"Should I take an umbrella in {city}?",
        ])
        call = self.call("get_weather", {"city": city})
        temp, cond = self.rng.randint(-15, 38), self.pick(CONDITIONS)
        result = json.dumps({"city": city, "temperature_c": temp, "condition": cond})
        answer = self.pick([f"In {city} it is {cond} and {temp} °C.", f"{city}: {cond}, {temp} °C.",
                            f"The weather in {city} is {cond} with a temperature of {temp} °C.",
                            f"It is {temp} °C and {cond} in {city} right now."])
        reasons = (self.pick([f"The user asks about the weather in {city}. I call get_weather.",
                              f"get_weather will tell me the weather in {city}."]),
                   self.pick([f"The tool reports {cond} and {temp} °C.", "I have the weather now."]))
        return "get_weather", ask, call, result, answer, reasons

    def tool_chat(self, kind=None):
        thinking = self.rng.random() < 0.5
        kind = kind or self.pick(["get_verse", "add", "get_weather"])
        maker = {"get_verse": self.verse_chat, "add": self.add_chat, "get_weather": self.weather_chat}[kind]
        name, ask, call, result, answer, (reason1, reason2) = maker(thinking)
        messages = []
        system = self.pick(SYSTEMS)
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": ask})
        first = {"role": "assistant", "content": "", "tool_calls": [call]}
        final = {"role": "assistant", "content": answer}
        if thinking:
            first["reasoning_content"] = reason1
            final["reasoning_content"] = reason2
        messages += [first, {"role": "tool", "tool_call_id": call["id"], "content": result}, final]
        return dict(kind="tool", tool=name, messages=messages, tools=self.tools_for(name), thinking=thinking,
                    reasoning_effort=self.pick(EFFORTS) if thinking else None)

    # -- reasoning without tools ------------------------------------------------------------------
    def arithmetic(self):
        op = self.pick(["+", "-", "*", "cmp"])
        if op == "+":
            a, b = self.rng.randint(2, 99), self.rng.randint(2, 99)
            ta, oa, tb, ob = a // 10 * 10, a % 10, b // 10 * 10, b % 10
            ask = self.pick([f"What is {a} + {b}?", f"Work out {a} plus {b}.", f"How much is {a} and {b} together?"])
            think = f"{a} + {b}: {ta} + {tb} = {ta + tb}, {oa} + {ob} = {oa + ob}, {ta + tb} + {oa + ob} = {a + b}."
            answer = self.pick([f"{a} + {b} = {a + b}.", f"{a + b}.", f"The answer is {a + b}."])
        elif op == "-":
            a, b = self.rng.randint(10, 99), self.rng.randint(1, 9)
            a, b = max(a, b), min(a, b)
            ask = self.pick([f"What is {a} - {b}?", f"What is {a} minus {b}?", f"Take {b} from {a}."])
            think = f"{a} - {b}: counting down {b} from {a} gives {a - b}."
            answer = self.pick([f"{a} - {b} = {a - b}.", f"{a - b}.", f"The answer is {a - b}."])
        elif op == "*":
            a, b = self.rng.randint(2, 12), self.rng.randint(2, 12)
            ask = self.pick([f"What is {a} times {b}?", f"Multiply {a} by {b}.", f"What is {a} * {b}?"])
            think = f"{a} times {b} is {a} added {b} times, which is {a * b}."
            answer = self.pick([f"{a} × {b} = {a * b}.", f"{a * b}.", f"The product is {a * b}."])
        else:
            a, b = self.rng.randint(1, 999), self.rng.randint(1, 999)
            while a == b:
                b = self.rng.randint(1, 999)
            big = max(a, b)
            ask = self.pick([f"Which is larger, {a} or {b}?", f"Is {a} bigger than {b}?", f"Which number is greater: {a} or {b}?"])
            think = f"Compare {a} and {b}: {big} is the larger one."
            answer = self.pick([f"{big} is larger.", f"{big}.", f"The larger number is {big}."])
        return ask, think, answer

    def book_order(self):
        i = self.rng.randrange(len(self.books) - 1)
        if self.rng.random() < 0.5:
            ask = self.pick([f"Which book comes after {self.books[i]}?", f"What book follows {self.books[i]}?"])
            think = f"In the King James Bible the order is {self.books[i]}, then {self.books[i + 1]}."
            answer = f"{self.books[i + 1]} comes after {self.books[i]}."
        else:
            ask = self.pick([f"Which book comes before {self.books[i + 1]}?", f"What book precedes {self.books[i + 1]}?"])
            think = f"The book before {self.books[i + 1]} is {self.books[i]}."
            answer = f"{self.books[i]} comes before {self.books[i + 1]}."
        return ask, think, answer

    def complete_verse(self):
        v = self.short_verse(20)
        words = v.text.split()
        cut = max(2, len(words) // 2)
        start = " ".join(words[:cut])
        ask = self.pick([f"Complete the verse: \"{start}\"", f"How does this verse go on: {start}",
                         f"Finish this line from the Bible: {start}"])
        think = f"This is {_verse_ref(v)}. The whole verse is: {v.text}"
        answer = self.pick([f"{v.text}", f"\"{v.text}\" ({_verse_ref(v)})", f"It goes: {v.text}"])
        return ask, think, answer

    def word_count(self):
        v = self.short_verse(12)
        words = v.text.rstrip(".;:,!?").split()[: self.rng.randint(3, 7)]
        phrase = " ".join(words)
        count = len(words)
        ask = self.pick([f"How many words are in \"{phrase}\"?", f"Count the words: {phrase}"])
        think = "Counting: " + ", ".join(f"{i + 1} {w}" for i, w in enumerate(words)) + f". That is {count} words."
        answer = self.pick([f"There are {count} words.", f"{count} words.", f"{count}."])
        return ask, think, answer

    def reasoning_chat(self):
        maker = self.pick([self.arithmetic, self.arithmetic, self.book_order, self.complete_verse, self.word_count])
        ask, think, answer = maker()
        thinking = self.rng.random() < 0.75
        messages = []
        system = self.pick(SYSTEMS)
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": ask})
        reply = {"role": "assistant", "content": answer}
        if thinking:
            reply["reasoning_content"] = think
        messages.append(reply)
        tools = self.tools_for(None) if self.rng.random() < 0.25 else []
        return dict(kind="think" if thinking else "chat", tool=None, messages=messages, tools=tools, thinking=thinking,
                    reasoning_effort=self.pick(EFFORTS) if thinking else None)

    def greeting_chat(self):
        ask, answer = self.pick(GREETINGS)
        messages = [{"role": "user", "content": ask}, {"role": "assistant", "content": answer}]
        thinking = self.rng.random() < 0.3
        if thinking:
            messages[-1]["reasoning_content"] = "A greeting; I answer politely."
        return dict(kind="chat", tool=None, messages=messages, tools=self.tools_for(None) if self.rng.random() < 0.3 else [],
                    thinking=thinking, reasoning_effort=None)

    def multi_turn_chat(self):
        """Two requests in one conversation: a tool round trip, then another question."""
        first = self.tool_chat()
        second = self.tool_chat() if self.rng.random() < 0.6 else self.reasoning_chat()
        messages = first["messages"] + [m for m in second["messages"] if m["role"] != "system"]
        tools = first["tools"]
        if second["tool"]:
            names = {t["function"]["name"] for t in tools}
            tools = tools + [TOOLS[second["tool"]]] * (second["tool"] not in names)
        thinking = first["thinking"]
        if not thinking:
            for m in messages:
                m.pop("reasoning_content", None)
        return dict(kind="tool" if second["tool"] else first["kind"], tool=second["tool"] or first["tool"],
                    messages=messages, tools=tools, thinking=thinking,
                    reasoning_effort=first["reasoning_effort"])

    def chat(self):
        r = self.rng.random()
        if r < 0.45:
            return self.tool_chat()
        if r < 0.85:
            return self.reasoning_chat()
        if r < 0.92:
            return self.greeting_chat()
        return self.multi_turn_chat()


def generate(train_chapters, count, seed):
    """(train, held_out): `count` chats, every 20th held out."""
    gen = ChatGenerator(train_chapters, seed)
    train, held = [], []
    for i in range(count):
        (held if i % 20 == 0 else train).append(gen.chat())
    return train, held
