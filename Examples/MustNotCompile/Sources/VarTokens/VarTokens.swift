import MainOnce

func reset() {
  // error: variable of type 'MainOnceToken' must be declared with a 'let'
  var token = MainOnceToken("reset by assignment")
  token = MainOnceToken("fresh again")
  _ = token.isDone
}

final class Owner {
  // error: variable of type 'MainLazy<Int, Never>' must be declared with a 'let'
  var lazy = MainLazy { 42 }
}
