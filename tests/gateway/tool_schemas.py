"""Tool schemas for the tool-calling tests and bench/bench_tools.py: nested objects, enums, arrays."""

from __future__ import annotations

from openai.types.chat import ChatCompletionToolParam

WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TOOLS: list[ChatCompletionToolParam] = [
    WEATHER,
    {
        "type": "function",
        "function": {
            "name": "book_flight",
            "description": "Book a flight.",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string"},
                    "destination": {"type": "string"},
                    "passengers": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                            },
                            "required": ["name", "age"],
                        },
                        "minItems": 1,
                        "maxItems": 3,
                    },
                    "cabin": {"enum": ["economy", "business", "first"]},
                },
                "required": ["origin", "destination", "passengers", "cabin"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "find_hotel",
            "description": "Search hotels.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "stay": {
                        "type": "object",
                        "properties": {
                            "check_in": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
                            "nights": {"type": "integer", "minimum": 1, "maximum": 30},
                        },
                        "required": ["check_in", "nights"],
                    },
                    "amenities": {
                        "type": "array",
                        "items": {"enum": ["wifi", "pool", "gym", "breakfast"]},
                        "maxItems": 4,
                    },
                },
                "required": ["city", "stay"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert_currency",
            "description": "Convert an amount between currencies.",
            "parameters": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "minimum": 0},
                    "from": {"enum": ["EUR", "USD", "GBP", "JPY"]},
                    "to": {"enum": ["EUR", "USD", "GBP", "JPY"]},
                },
                "required": ["amount", "from", "to"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The current local time in a timezone.",
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string", "maxLength": 40}},
                "required": ["timezone"],
            },
        },
    },
]
