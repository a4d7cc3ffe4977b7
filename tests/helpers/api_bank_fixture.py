"""A tiny API-Bank copy written here, in the benchmark's layout and formats: our own API classes (the same
interface as the benchmark's: class attributes, `call` returning {api_name, input, output, exception},
`check_api_call_correctness`), databases, level-1 and level-2 dialogues and a level-3 file. Nothing in it
comes from the benchmark's data.

Calls: level 1 three (GetUserToken, AddNote, CountWords), level 2 two (ToolSearcher, CountWords), level 3
two (ToolSearcher, CityWeather). Its ToolSearcher modules import a package that does not exist, as the
benchmark's need sentence-transformers, so the catalog reports them unavailable.
"""

from __future__ import annotations

import json
import os
import textwrap

API_BASE = '''
class API:
    description = ""
    input_parameters = {}
    output_parameters = {}

    def check_api_call_correctness(self, response, groundtruth) -> bool:
        raise NotImplementedError

    def call(self, **kwargs) -> dict:
        raise NotImplementedError
'''

CHECK_TOKEN = '''
from apis.api import API


class CheckToken(API):
    description = "Check the user token."
    input_parameters = {"token": {"type": "str", "description": "The token."}}
    output_parameters = {"username": {"type": "str", "description": "The user."}}
    database_name = "Account"

    def __init__(self, init_database=None):
        self.database = init_database or {}

    def check_token(self, token):
        for name, row in self.database.items():
            if row["token"] == token:
                return name
        raise Exception("The token is invalid.")

    def call(self, token):
        try:
            out = self.check_token(token)
        except Exception as e:
            return {"api_name": "CheckToken", "input": {"token": token}, "output": None, "exception": str(e)}
        return {"api_name": "CheckToken", "input": {"token": token}, "output": out, "exception": None}

    def check_api_call_correctness(self, response, groundtruth):
        return response == groundtruth
'''

GET_USER_TOKEN = '''
from apis.api import API


class GetUserToken(API):
    description = "Get the token of a user from the username and password."
    input_parameters = {
        "username": {"type": "str", "description": "The username."},
        "password": {"type": "str", "description": "The password."},
    }
    output_parameters = {"token": {"type": "str", "description": "The token."}}
    database_name = "Account"

    def __init__(self, init_database=None):
        self.database = init_database or {}

    def call(self, username, password):
        given = {"username": username, "password": password}
        row = self.database.get(username)
        if row is None or row["password"] != password:
            return {"api_name": "GetUserToken", "input": given, "output": None, "exception": "Wrong username or password."}
        return {"api_name": "GetUserToken", "input": given, "output": {"token": row["token"]}, "exception": None}

    def check_api_call_correctness(self, response, groundtruth):
        return (
            response["input"] == groundtruth["input"]
            and response["output"] == groundtruth["output"]
            and response["exception"] == groundtruth["exception"]
        )
'''

ADD_NOTE = '''
import datetime

from apis.api import API


class AddNote(API):
    description = "Add a note for a user at a date."
    input_parameters = {
        "token": {"type": "str", "description": "The user's token."},
        "content": {"type": "str", "description": "What the note says."},
        "date": {"type": "str", "description": "The date. Format: %Y-%m-%d"},
    }
    output_parameters = {"status": {"type": "str", "description": "success or failed"}}
    database_name = "Note"

    def __init__(self, init_database=None, token_checker=None):
        self.database = init_database or {}
        self.token_checker = token_checker

    def call(self, token, content, date):
        given = {"token": token, "content": content, "date": date}
        try:
            datetime.datetime.strptime(date, "%Y-%m-%d")
            user = self.token_checker.check_token(token)
            self.database[str(len(self.database) + 1)] = {"user": user, "content": content, "date": date}
        except Exception as e:
            return {"api_name": "AddNote", "input": given, "output": None, "exception": str(e)}
        return {"api_name": "AddNote", "input": given, "output": "success", "exception": None}

    def check_api_call_correctness(self, response, groundtruth):
        assert response["api_name"] == groundtruth["api_name"], "The API name is not correct."
        a = set(response["input"]["content"].lower().split())
        b = set(groundtruth["input"]["content"].lower().split())
        close = len(a & b) / len(a | b) > 0.5
        return (
            close
            and response["input"]["date"] == groundtruth["input"]["date"]
            and response["output"] == groundtruth["output"]
            and response["exception"] == groundtruth["exception"]
        )
'''

COUNT_WORDS = '''
from apis.api import API


class CountWords(API):
    description = "Count the words of a text that have at least a given length."
    input_parameters = {
        "text": {"type": "str", "description": "The text."},
        "min_length": {"type": "int", "description": "The shortest word counted."},
    }
    output_parameters = {"count": {"type": "int", "description": "How many words."}}

    def call(self, text, min_length):
        given = {"text": text, "min_length": min_length}
        count = sum(len(w) >= min_length for w in text.split())
        return {"api_name": "CountWords", "input": given, "output": {"count": count}, "exception": None}

    def check_api_call_correctness(self, response, groundtruth):
        return response["output"] == groundtruth["output"] and response["exception"] == groundtruth["exception"]
'''

TOOL_SEARCH = '''
import a_package_that_is_not_installed_here  # noqa: F401  (the benchmark's needs sentence-transformers)

from apis.api import API


class ToolSearcher(API):
    pass
'''

CITY_WEATHER = '''
from apis.api import API


class CityWeather(API):
    description = "The weather of a city today."
    input_parameters = {"city": {"type": "str", "description": "The city."}}
    output_parameters = {"sky": {"type": "str", "description": "The sky."}}
    TABLE = {"Oslo": "snow", "Lima": "sun"}

    def call(self, city):
        given = {"city": city}
        if city not in self.TABLE:
            return {"api_name": "CityWeather", "input": given, "output": None, "exception": "Unknown city."}
        return {"api_name": "CityWeather", "input": given, "output": {"sky": self.TABLE[city]}, "exception": None}

    def check_api_call_correctness(self, response, groundtruth):
        return response == groundtruth
'''

ACCOUNTS = {"ada": {"password": "pw1", "token": "tok-ada-1"}, "bo": {"password": "pw2", "token": "tok-bo-2"}}
NOTES = {"1": {"user": "bo", "content": "buy milk", "date": "2023-01-02"}}


def _result(name: str, given: dict, output, exception=None) -> dict:
    return {"api_name": name, "input": given, "output": output, "exception": exception}


def _api(name: str, params: dict, output, exception=None) -> dict:
    return {"role": "API", "api_name": name, "param_dict": params, "result": _result(name, params, output, exception)}


COUNT_DOC = {
    "name": "CountWords",
    "description": "Count the words of a text that have at least a given length.",
    "input_parameters": {
        "text": {"type": "str", "description": "The text."},
        "min_length": {"type": "int", "description": "The shortest word counted."},
    },
    "output_parameters": {"count": {"type": "int", "description": "How many words."}},
}
WEATHER_DOC = {
    "name": "CityWeather",
    "description": "The weather of a city today.",
    "input_parameters": {"city": {"type": "str", "description": "The city."}},
    "output_parameters": {"sky": {"type": "str", "description": "The sky."}},
}

LEVEL_1 = {
    "AddNote-level-1-1.jsonl": [
        {"role": "User", "text": "Please add a note for 2023-03-04: call the plumber."},
        {"role": "AI", "text": "Sure. What are your username and password?"},
        {"role": "User", "text": "I am ada, password pw1."},
        _api("GetUserToken", {"username": "ada", "password": "pw1"}, {"token": "tok-ada-1"}),
        {"role": "AI", "text": "Thanks, adding the note now."},
        _api("AddNote", {"token": "tok-ada-1", "content": "call the plumber", "date": "2023-03-04"}, "success"),
        {"role": "AI", "text": "The note is added."},
    ],
    "CountWords-level-1-1.jsonl": [
        {"role": "User", "text": "How many words of four letters or more are in 'the cat sat on a warm mat'?"},
        _api("CountWords", {"text": "the cat sat on a warm mat", "min_length": 4}, {"count": 1}),
        {"role": "AI", "text": "One word."},
    ],
}
LEVEL_2 = {
    "CountWords-level-2-1.jsonl": [
        {"role": "User", "text": "Count the words of at least three letters in 'big red fox ran'."},
        {"role": "AI", "text": "Let me find a tool."},
        _api("ToolSearcher", {"keywords": "count words"}, COUNT_DOC),
        _api("CountWords", {"text": "big red fox ran", "min_length": 3}, {"count": 4}),
        {"role": "AI", "text": "Four words."},
    ]
}
LEVEL_3 = [
    {
        "requirement": "Tell me what the sky is like in Oslo today.",
        "response": "It snows in Oslo.",
        "apis": [
            {
                "api_name": "ToolSearcher",
                "input": {"keywords": "city weather"},
                "output": _result("ToolSearcher", {"keywords": "city weather"}, WEATHER_DOC),
            },
            {
                "api_name": "CityWeather",
                "input": {"city": "Oslo"},
                "output": _result("CityWeather", {"city": "Oslo"}, {"sky": "snow"}),
            },
        ],
    }
]


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_copy(root: str) -> str:
    """The copy at `root` (created); returns `root`."""
    _write(os.path.join(root, "apis", "__init__.py"), "from .api import API  # noqa: F401\n")
    _write(os.path.join(root, "apis", "api.py"), textwrap.dedent(API_BASE))
    for name, src in [
        ("check_token", CHECK_TOKEN),
        ("get_user_token", GET_USER_TOKEN),
        ("add_note", ADD_NOTE),
        ("count_words", COUNT_WORDS),
        ("tool_search", TOOL_SEARCH),
    ]:
        _write(os.path.join(root, "apis", f"{name}.py"), textwrap.dedent(src))
    _write(os.path.join(root, "lv3_apis", "city_weather.py"), textwrap.dedent(CITY_WEATHER))
    _write(os.path.join(root, "lv3_apis", "tool_search.py"), textwrap.dedent(TOOL_SEARCH))
    _write(os.path.join(root, "init_database", "Account.json"), json.dumps(ACCOUNTS))
    _write(os.path.join(root, "init_database", "Note.json"), json.dumps(NOTES))
    for level, files in ((1, LEVEL_1), (2, LEVEL_2)):
        folder = "level-1-given-desc" if level == 1 else "level-2-toolsearcher"
        for name, items in files.items():
            _write(os.path.join(root, "lv1-lv2-samples", folder, name), "".join(json.dumps(i) + "\n" for i in items))
    _write(os.path.join(root, "test-data", "level-3.json"), json.dumps(LEVEL_3, indent=1))
    return root
